package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/fabraid/fabraid/engine/layout"
)

// writeStripes writes the stripe requests of one request that spans
// several stripes in shared rounds: every stripe's reads in one batch,
// every journal record in the next, every data and parity write in the
// last. A batch is submitted at once (one io_uring_enter, under one block
// plug), so a member's chunks of consecutive rows, adjacent on it, can
// merge into one I/O (a 1 MiB write on 4+2 with 64 KiB chunks: six member
// writes of 256 KiB instead of 24 of 64 KiB from up to eight goroutines,
// each submitting its own), and each phase is one round trip. The batch is
// sorted by member and offset so that a member's chunks are also
// consecutive where members share a request queue (partitions of one
// disk): the plug merges a bio only into the latest request of its queue.
//
// Each stripe keeps the state machine of writeStripe (steps 1-8): the
// request holds every stripe's write-intent bit and lock from planning to
// acknowledgement (locks taken in ascending lock order, as lockRows does,
// so two multi-stripe holders never wait on each other), every stripe's
// record is durable before any write of that stripe is submitted, and
// every stripe ends with finishWrite. A stripe whose read or record failed
// or whose record found no room (nothing of it written yet) is written on
// its own afterwards by writeStripeLocked, still holding its bit and lock.
func (v *Volume) writeStripes(p []byte, reqs []layout.StripeReq) error {
	for i, r := range reqs {
		if err := v.bm.begin(v.bm.region(r.Row)); err != nil {
			for _, done := range reqs[:i] {
				v.bm.end(v.bm.region(done.Row))
			}
			return err
		}
	}
	defer func() {
		for _, r := range reqs {
			v.bm.end(v.bm.region(r.Row))
		}
	}()
	unlock := v.lockStripes(reqs)
	defer unlock()
	if rs := v.rs.Load(); rs != nil {
		for _, r := range reqs {
			if err := v.resyncPendingLocked(rs, r.Group, r.Row, v.hooks.skipDemandResync); err != nil {
				return fmt.Errorf("stripe %d: resync: %w", r.Stripe, err)
			}
		}
	}
	run := v.newStripeRun(p, reqs)
	defer run.release()
	if err := run.write(); err != nil {
		return err
	}
	// The stripes set aside, each on its own (nothing of them written).
	var errs []error
	for i, first := range run.alone {
		if first < 0 {
			continue
		}
		errs = append(errs, v.writeStripeLocked(run.ops[i], p, reqs[i], first))
		run.ops[i].release()
	}
	return errors.Join(errs...)
}

// lockStripes locks the stripes of reqs exclusively, each lock once, in
// ascending lock order, and returns the unlock.
func (v *Volume) lockStripes(reqs []layout.StripeReq) func() {
	shards := make([]int, 0, len(reqs))
	for _, r := range reqs {
		shards = append(shards, lockShard(r.Stripe))
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	for _, s := range shards {
		v.locks[s].Lock()
	}
	return func() {
		for i := len(shards) - 1; i >= 0; i-- {
			v.locks[shards[i]].Unlock()
		}
	}
}

// stripeRun is the state of writeStripes' shared rounds: per stripe its
// op, plan, journal record and sequence number, and whether it is set
// aside (alone[i] >= 0: the attempt writeStripeLocked starts from).
type stripeRun struct {
	v     *Volume
	p     []byte
	reqs  []layout.StripeReq
	ops   []*stripeOp
	plans []stripeWritePlan
	recs  []*pendingRecord
	seqs  []uint64
	alone []int
	ok    []bool
	batch []IO
	from  []runIO
}

// runIO is where an IO of the shared batch came from: ops[op].ios[io].
type runIO struct{ op, io int }

func (v *Volume) newStripeRun(p []byte, reqs []layout.StripeReq) *stripeRun {
	n := len(reqs)
	run := &stripeRun{
		v: v, p: p, reqs: reqs, ops: make([]*stripeOp, n), plans: make([]stripeWritePlan, n),
		recs: make([]*pendingRecord, n), seqs: make([]uint64, n), alone: make([]int, n), ok: make([]bool, n),
	}
	for i := range reqs {
		run.ops[i] = v.newOp()
		run.alone[i] = -1
	}
	return run
}

func (run *stripeRun) release() {
	for _, op := range run.ops {
		run.v.putOp(op)
	}
}

// active reports whether stripe i is still in the shared rounds.
func (run *stripeRun) active(i int) bool { return run.alone[i] < 0 }

// write runs the shared rounds. It returns an error that fails the request
// (every stripe with a record reserved has it retired from the in-flight
// set by then); stripes set aside are left to the caller.
func (run *stripeRun) write() error {
	v := run.v
	if err := v.stopErr(); err != nil {
		return err
	}
	for i, r := range run.reqs {
		sp, err := v.planStripeWrite(r)
		if err != nil {
			return err
		}
		run.plans[i] = sp
		v.addWriteReads(run.ops[i], r, sp.plan)
	}
	if err := run.execute(); err != nil {
		return err
	}
	for i, r := range run.reqs {
		if !run.ok[i] {
			run.setAside(i, 1) // a read failed: re-plan
			continue
		}
		if err := v.computeWrite(run.ops[i], run.p, r, run.plans[i].plan); err != nil {
			return err
		}
	}
	if err := run.journal(); err != nil {
		return err
	}
	for i, r := range run.reqs {
		if run.active(i) {
			v.addWriteWrites(run.ops[i], run.p, r, run.plans[i].plan)
		}
	}
	err := run.execute()
	var errs []error
	for i, r := range run.reqs {
		if !run.active(i) {
			continue
		}
		v.journalDone(r, run.seqs[i])
		if err == nil {
			errs = append(errs, v.finishWrite(run.ops[i], r, run.ok[i], run.seqs[i], run.plans[i].gen))
		}
	}
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

// setAside takes stripe i out of the shared rounds; writeStripeLocked
// writes it afterwards from attempt first.
func (run *stripeRun) setAside(i, first int) {
	run.alone[i] = first
	run.ops[i].release()
}

// journal writes the records of the active stripes that need one in one
// round. Only the first record may wait for room in the rings (the run
// holds no other record yet); a stripe whose record finds none, or whose
// record write failed, is set aside. Every stripe's record goes to the
// member that took the previous one where that member may hold it, so the
// run's records are adjacent in one ring and leave as one FUA write.
func (run *stripeRun) journal() error {
	v := run.v
	waited, prev := false, -1
	for i, r := range run.reqs {
		sp := run.plans[i]
		if !run.active(i) || sp.journal == 0 {
			continue
		}
		slots := v.journalSlotNear(r, sp.avoid, prev)
		rec, ok, err := v.jrn.reserve(r, sp.journal, slots, !waited)
		if err != nil {
			run.dropRecords()
			return err
		}
		waited = true
		if !ok {
			run.setAside(i, 0)
			continue
		}
		prev = slots[0]
		run.recs[i] = rec
	}
	segs := run.encodeRecords()
	if len(segs) > 0 {
		ios := make([]IO, len(segs))
		for s, seg := range segs {
			ios[s] = seg.io
		}
		v.exec.Execute(ios)
		for s, seg := range segs {
			for _, i := range seg.recs {
				run.recs[i].ios[0].Err = ios[s].Err
			}
			v.jrn.runBufs.Put(seg.bp)
		}
	}
	var failed error
	for i, rec := range run.recs {
		if rec == nil {
			continue
		}
		run.recs[i] = nil
		err := v.jrn.written(rec)
		switch {
		case err == nil:
			run.seqs[i] = rec.seq
		case errors.Is(err, errRetry):
			run.setAside(i, 1)
		default:
			failed = cmp.Or(failed, err) // written dropped rec
		}
	}
	if failed != nil {
		run.dropRecords()
	}
	return failed
}

// dropRecords retires the records written so far from the in-flight set:
// the request fails before any of its stripes is written.
func (run *stripeRun) dropRecords() {
	for i, rec := range run.recs {
		if rec != nil {
			if rec.bp != nil {
				run.v.jrn.bufs.Put(rec.bp)
			}
			run.v.jrn.done(rec.seq)
			run.recs[i] = nil
		}
	}
	for i, seq := range run.seqs {
		if seq != 0 {
			run.v.jrn.done(seq)
			run.seqs[i] = 0
		}
	}
}

// execute runs the IOs queued on the active stripes' ops as one batch,
// sorted by member slot and offset, and collects each op's results into
// run.ok. It returns the first member failure that could not be recorded.
func (run *stripeRun) execute() error {
	run.batch, run.from = run.batch[:0], run.from[:0]
	for i, op := range run.ops {
		if !run.active(i) {
			continue
		}
		for k := range op.ios {
			run.from = append(run.from, runIO{op: i, io: k})
		}
	}
	slices.SortStableFunc(run.from, func(a, b runIO) int {
		oa, ob := run.ops[a.op], run.ops[b.op]
		return cmp.Or(cmp.Compare(oa.slots[a.io], ob.slots[b.io]), cmp.Compare(oa.ios[a.io].Off, ob.ios[b.io].Off))
	})
	for _, f := range run.from {
		run.batch = append(run.batch, run.ops[f.op].ios[f.io])
	}
	if len(run.batch) > 0 {
		run.v.exec.Execute(run.batch)
	}
	for k, f := range run.from {
		run.ops[f.op].ios[f.io].Err = run.batch[k].Err
	}
	var failed error
	for i, op := range run.ops {
		if !run.active(i) {
			continue
		}
		run.ok[i] = op.collect()
		if op.err != nil {
			failed = cmp.Or(failed, op.err)
		}
	}
	return failed
}

// recordSegment is one FUA write carrying the records run.recs[recs...],
// which lie back to back in one member's ring; bp is its pooled buffer.
type recordSegment struct {
	io   IO
	recs []int
	bp   *[]byte
}

// encodeRecords encodes the run's reserved records into segments: records
// adjacent in one member's ring share one write. Every record keeps its
// own IO (rec.ios, a view of its bytes in the segment) for the failure
// accounting of journal.written.
func (run *stripeRun) encodeRecords() []recordSegment {
	j := run.v.jrn
	var order []int
	for i, rec := range run.recs {
		if rec != nil {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		ra, rb := run.recs[a], run.recs[b]
		return cmp.Or(cmp.Compare(ra.slots[0], rb.slots[0]), cmp.Compare(ra.offs[0], rb.offs[0]))
	})
	var segs []recordSegment
	for len(order) > 0 {
		n, size := 1, run.recs[order[0]].size
		for n < len(order) && run.recs[order[n]].follows(run.recs[order[n-1]]) {
			size += run.recs[order[n]].size
			n++
		}
		bp := j.runBuffer(size)
		first := run.recs[order[0]]
		seg := recordSegment{recs: order[:n:n], bp: bp,
			io: IO{Dev: run.v.dev(first.slots[0]), Write: true, FUA: true, Buf: (*bp)[:size], Off: first.offs[0]}}
		at := int64(0)
		for _, i := range seg.recs {
			rec := run.recs[i]
			j.encodeInto(rec, run.reqs[i], run.plans[i].journal, run.ops[i].shards, run.v.epoch.Load(), (*bp)[at:at+rec.size])
			at += rec.size
		}
		segs = append(segs, seg)
		order = order[n:]
	}
	return segs
}
