package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// DirectWrite is a one-stripe write planned for a caller that submits the
// member I/O itself, such as a ublk queue thread on its own io_uring: a
// small write then costs no goroutine hand-off, only its rounds of member
// I/O: the reads (of a read-modify-write, a reconstruct-write, or a
// degraded write), the journal record when the stripe needs one (a chunk
// not durably readable, or data on the owner's members), then the data and
// parity writes. It is the stripe write of writeStripe,
// steps 1-8, with every step that would wait taken only when it need not:
//
//   - PlanWrite takes the write-intent bit only when it is already durable
//     and the stripe lock only when it is free, plans as writeStripe does
//     (planStripeWrite, healthy or degraded) but not a row the background
//     resync has yet to reach, and lets each round through the freeze gate
//     only while it is open;
//   - when the journal record holds only bytes the request writes (every
//     journaled data chunk written whole over the request's range), it is
//     written in the read round, else after the reads (journalEarly);
//   - after each round the caller calls Step. Step computes parity after
//     the reads, reserves the journal record only where the rings have
//     room, and hands out the next round; when a member I/O failed, the
//     journal is full, the gate shut between rounds, or a member failure
//     is not yet recorded, it stops and tells the caller that Finish may
//     block, and Finish then carries the write on the general path
//     (re-planned after a failed read or journal write, member failures
//     handled as writeStripe does), still holding the bit and the lock.
//
// The caller performs the IOs of each round (any order), sets each IO's
// Err, calls Step, and once Step reports no further round calls Finish
// exactly once. A planned write holds its stripe lock from PlanWrite to
// Finish.
type DirectWrite struct {
	IOs []IO

	v       *Volume
	op      *stripeOp
	p       []byte
	off     int64
	r       layout.StripeReq
	sp      stripeWritePlan
	region  int64
	lk      *sync.RWMutex
	state   directWriteState
	rec     *pendingRecord // the journal record, once reserved
	reads   int            // with rec, before its writes ran: IOs[:reads] are the reads, the rest the record's writes
	seq     uint64         // the journal record, once written
	err     error          // a compute error: Finish returns it
	t0      time.Time
	counted bool
}

type directWriteState int

const (
	dwReading       directWriteState = iota // IOs: the read phase, through the gate
	dwJournaling                            // IOs: the journal record, through the gate
	dwWriting                               // IOs: the write phase, through the gate
	dwReadFailed                            // a read failed: Finish re-plans
	dwJournalHeld                           // no room in the journal: Finish appends
	dwJournalQueued                         // record encoded, the gate was shut
	dwJournalRan                            // the record's writes ran, one failed
	dwWritesHeld                            // write phase to queue, the gate was shut
	dwEarlyFailed                           // a read or the early record failed: Finish re-plans
	dwWritten                               // the write phase ran: Finish ends it
	dwDone                                  // written, nothing left that may wait
	dwFailed                                // err is set
)

// PlanWrite plans a write of len(p) bytes at off that lies inside one
// stripe and can start without waiting (see
// DirectWrite). It returns false when the write needs WriteAt; nothing is
// then held. p must stay unchanged until Finish.
func (v *Volume) PlanWrite(p []byte, off int64) (*DirectWrite, bool) {
	if v.check() != nil || v.geo.CheckRange(off, len(p)) != nil || len(p) == 0 {
		return nil, false
	}
	op := v.newOp()
	reqs := op.split(off, len(p))
	c := &v.stats.plannedWrites
	if len(reqs) != 1 {
		c.notOneStripe.Add(1)
		v.putOp(op)
		return nil, false
	}
	d := &DirectWrite{v: v, op: op, p: p, off: off, r: reqs[0], t0: time.Now()}
	if declined := d.take(); declined != nil {
		declined.Add(1)
		v.putOp(op)
		return nil, false
	}
	c.planned.Add(1)
	if v.background.Load() {
		v.inflight.Add(1) // a rebuild or scrub yields to it, as to WriteAt
		v.foreground.Add(1)
		d.counted = true
	}
	v.addWriteReads(op, d.r, d.sp.plan)
	d.state, d.IOs = dwReading, op.ios
	if len(op.ios) == 0 { // a full-stripe write: nothing to read
		v.gate.exit()
		d.afterReads()
		return d, true
	}
	d.journalEarly()
	return d, true
}

// journalEarly reserves and encodes the stripe's journal record before
// the reads when it holds only the request's own bytes (every journaled
// data position written over all of [Lo, Hi)), and adds its writes to the
// read round: the record is durable before any write of the stripe as
// before, one dependent round sooner. Without room in the rings now,
// afterReads tries again.
func (d *DirectWrite) journalEarly() {
	v, op := d.v, d.op
	shards, ok := requestShards(d.r, d.sp.journal, d.p, v.geo.K)
	if !ok {
		return
	}
	rec, ok, err := v.jrn.reserve(d.r, d.sp.journal, v.journalSlot(d.r, d.sp.avoid), false)
	if err != nil || !ok {
		return
	}
	v.jrn.encode(rec, d.r, d.sp.journal, shards, v.epoch.Load())
	d.rec, d.reads = rec, len(op.ios)
	d.IOs = append(append(make([]IO, 0, len(op.ios)+len(rec.ios)), op.ios...), rec.ios...)
}

// requestShards returns, for a journal record of the data positions in
// mask over [r.Lo, r.Hi), each position's bytes when the request p writes
// all of them (nil at the other positions); false when it does not.
func requestShards(r layout.StripeReq, mask uint64, p []byte, k int) ([][]byte, bool) {
	if mask&(1<<uint(k)-1) == 0 {
		return nil, false
	}
	shards := make([][]byte, k)
	for _, s := range r.Segs {
		if mask&(1<<uint(s.Pos)) != 0 && s.Off == r.Lo && s.Off+s.Len == r.Hi {
			shards[s.Pos] = p[s.BufOff : s.BufOff+int64(s.Len)]
		}
	}
	for pos := range k {
		if mask&(1<<uint(pos)) != 0 && shards[pos] == nil {
			return nil, false
		}
	}
	return shards, true
}

// earlyRoundDone ends a read round that carried the journal record: the
// results go back to the reads and the record's writes; the record counts
// as written unless one of its writes failed. Any failure sends the write
// to Finish, which fails the members and re-plans on the general path
// (which journals anew); the record, written or not, is no longer in
// flight.
func (d *DirectWrite) earlyRoundDone(ios []IO, failed bool) {
	v, op, rec := d.v, d.op, d.rec
	for i := range op.ios {
		op.ios[i].Err = ios[i].Err
	}
	for i := range rec.ios {
		rec.ios[i].Err = ios[d.reads+i].Err
	}
	d.rec, d.reads = nil, 0
	err := v.jrn.written(rec)
	if err == nil && !failed {
		d.seq = rec.seq
		return
	}
	if err == nil {
		v.journalDone(d.r, rec.seq)
	}
	d.state, d.err = dwEarlyFailed, err
}

// take acquires what the write holds (bit, lock, plan, a pass through the
// gate) without waiting, or nothing: it then returns the counter of the
// reason.
func (d *DirectWrite) take() (declined *atomic.Uint64) {
	v, r, c := d.v, d.r, &d.v.stats.plannedWrites
	d.region = v.bm.region(r.Row)
	if !v.bm.tryBegin(d.region) {
		return &c.bitNotDurable
	}
	d.lk = v.lockFor(r.Stripe)
	if !d.lk.TryLock() {
		v.bm.end(d.region)
		return &c.stripeBusy
	}
	sp, err := v.planStripeWrite(r)
	rs := v.rs.Load()
	switch {
	case err != nil || v.stopErr() != nil:
		declined = &c.unplannable
	case rs != nil && rs.needs(r.Stripe, r.Group, r.Row):
		declined = &c.resyncPending // the stripe's parity may be torn: writeStripe resyncs it
	case !v.gate.tryEnter():
		declined = &c.gateShut
	}
	if declined != nil {
		d.lk.Unlock()
		v.bm.end(d.region)
		return declined
	}
	d.sp = sp
	return nil
}

// Step ends the round whose IOs the caller performed. more reports that
// the next round's IOs are in d.IOs. Otherwise the caller calls Finish;
// block reports that Finish may wait (for member failures to be handled,
// the general path, or a frozen volume), so a caller that must not wait
// calls it elsewhere.
func (d *DirectWrite) Step() (more, block bool) {
	v := d.v
	if d.state != dwReading && d.state != dwJournaling && d.state != dwWriting {
		return false, d.state != dwFailed
	}
	v.gate.exit() // the round's member I/O is done
	ios := d.IOs
	d.IOs = nil
	failed := false
	for i := range ios {
		failed = failed || ios[i].Err != nil
	}
	if d.state == dwReading && d.reads > 0 {
		if d.earlyRoundDone(ios, failed); d.state == dwEarlyFailed {
			return false, true
		}
	}
	switch {
	case d.state == dwReading && failed:
		d.state = dwReadFailed
		return false, true
	case d.state == dwJournaling && failed:
		d.state = dwJournalRan
		return false, true
	case d.state == dwWriting:
		// Done unless a member failed since the plan or a failure is not
		// yet recorded: a failure marked after this check came after
		// every write of this one completed, so the metadata write that
		// records it flushes them, and no member was skipped. The record
		// leaves the in-flight set first, as in execWrite.
		v.journalDone(d.r, d.seq)
		gen := v.failGen.Load()
		if failed || gen != d.sp.gen || v.recordedGen.Load() < gen || v.faults.ackBeforeRecorded {
			d.state = dwWritten
			return false, true
		}
		d.state = dwDone
		return false, false
	case d.state == dwReading:
		d.afterReads()
	case d.state == dwJournaling:
		// Every copy is durable: written does not wait.
		if err := v.jrn.written(d.rec); err != nil {
			d.state, d.err = dwFailed, err
			return false, false
		}
		d.seq = d.rec.seq
		d.queueWrites()
	}
	return d.IOs != nil, d.state != dwFailed
}

// afterReads computes parity and hands out the next round: the journal
// record where the stripe needs one and the rings have room, else the
// writes.
func (d *DirectWrite) afterReads() {
	v, op := d.v, d.op
	if err := v.computeWrite(op, d.p, d.r, d.sp.plan); err != nil {
		d.state, d.err = dwFailed, err
		return
	}
	if d.sp.journal == 0 || d.seq != 0 { // no record, or written with the reads
		d.queueWrites()
		return
	}
	rec, ok, err := v.jrn.reserve(d.r, d.sp.journal, v.journalSlot(d.r, d.sp.avoid), false)
	switch {
	case err != nil:
		d.state, d.err = dwFailed, err
		return
	case !ok:
		d.state = dwJournalHeld
		return
	}
	v.jrn.encode(rec, d.r, d.sp.journal, op.shards, v.epoch.Load())
	d.rec = rec
	if !v.gate.tryEnter() {
		d.state = dwJournalQueued
		return
	}
	d.state, d.IOs = dwJournaling, rec.ios
}

// queueWrites hands out the write phase, or leaves it to Finish when the
// gate is shut.
func (d *DirectWrite) queueWrites() {
	v, op := d.v, d.op
	op.ios, op.slots = op.ios[:0], op.slots[:0]
	v.addWriteWrites(op, d.p, d.r, d.sp.plan)
	if !v.gate.tryEnter() {
		d.state = dwWritesHeld
		return
	}
	d.state, d.IOs = dwWriting, op.ios
}

// Finish ends the write and returns what WriteAt would have: len(p) once
// the data is written and parity consistent, or the error. It releases
// everything the write held. After a Step that reported block false it
// does not wait.
func (d *DirectWrite) Finish() (int, error) {
	v, op := d.v, d.op
	err := d.finish()
	op.release()
	op.err = nil
	v.putOp(op)
	d.op, d.IOs = nil, nil
	d.lk.Unlock()
	v.bm.end(d.region)
	v.endRequest(d.counted)
	n := len(d.p)
	if err != nil {
		n, err = 0, fmt.Errorf("write at %d: %w", d.off, err)
	}
	v.stats.write.done(d.t0, int64(n), err)
	return n, err
}

func (d *DirectWrite) finish() error {
	v, op := d.v, d.op
	switch d.state {
	case dwFailed:
		return d.err
	case dwReadFailed:
		// Nothing was written: as execWrite's failed read phase, the
		// members are failed and the write re-planned.
		op.collect()
		return d.replan()
	case dwEarlyFailed:
		// Nothing of the stripe was written; a record may have been,
		// which replay may apply (the write was not acknowledged) and a
		// newer one supersedes.
		op.collect()
		if d.err != nil {
			return d.replanAfter(d.err)
		}
		return d.replan()
	case dwJournalHeld:
		seq, err := v.jrn.append(d.r, d.sp.journal, op.shards, v.journalSlot(d.r, d.sp.avoid), v.epoch.Load())
		if err != nil {
			return d.replanAfter(err)
		}
		return d.writeBlocking(seq)
	case dwJournalQueued, dwJournalRan:
		if d.state == dwJournalQueued {
			v.exec.Execute(d.rec.ios)
		}
		if err := v.jrn.written(d.rec); err != nil {
			return d.replanAfter(err)
		}
		return d.writeBlocking(d.rec.seq)
	case dwWritesHeld:
		ok := op.run()
		v.journalDone(d.r, d.seq)
		return v.finishWrite(op, d.r, ok, d.seq, d.sp.gen)
	case dwWritten:
		return v.finishWrite(op, d.r, op.collect(), d.seq, d.sp.gen)
	case dwDone:
		return nil // Finish may run on a thread that must not wait
	}
	// Finish before the last Step: the caller broke the contract; the
	// round's pass through the gate ends here.
	v.gate.exit()
	return fmt.Errorf("stripe %d: planned write finished in state %d", d.r.Stripe, d.state)
}

// replanAfter is writeStripeLocked's answer to a failed journal append:
// errRetry (a member failed, nothing of the stripe written) re-plans.
func (d *DirectWrite) replanAfter(err error) error {
	if !errors.Is(err, errRetry) {
		return err
	}
	return d.replan()
}

// replan carries the write on the general path from its second attempt,
// as writeStripeLocked does after a failed first one.
func (d *DirectWrite) replan() error {
	op := d.op
	op.release()
	if op.err != nil {
		return op.err
	}
	return d.v.writeStripeLocked(op, d.p, d.r, 1)
}

// writeBlocking runs the write phase on the general path once the record
// seq (or 0) is durable.
func (d *DirectWrite) writeBlocking(seq uint64) error {
	v, op := d.v, d.op
	op.ios, op.slots = op.ios[:0], op.slots[:0]
	v.addWriteWrites(op, d.p, d.r, d.sp.plan)
	ok := op.run()
	v.journalDone(d.r, seq)
	return v.finishWrite(op, d.r, ok, seq, d.sp.gen)
}
