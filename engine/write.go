package engine

// The stripe write, one state machine per stripe request (writeStripe,
// execWrite). Steps, in order, and what holds after each:
//
//  1. intent: the region's write-intent bit is durable on every writable
//     member (bm.begin); the write counts as in flight until bm.end, and as
//     touched until the next clean session.
//  2. lock: the stripe's lock is held exclusively; a row the background
//     resync has not reached is resynced first (its parity may be torn).
//  3. plan: masks from member roles (writeMasks): unreadable, unwritable,
//     and the data positions not durably readable (journal).
//     layout.PlanWrite picks full-stripe, read-modify-write or
//     reconstruct-write.
//  4. read: chunks the plan needs; a failure re-plans (nothing written).
//  5. compute: parity (and reconstructed data) over [Lo, Hi).
//  6. journal: if a data position is not durably readable, or is on the
//     owner's members (owner-domain journaling), its post-write contents
//     are logged to a member outside the owner's domain and flushed before
//     anything of the stripe is written; the record is in flight until the
//     write phase ends.
//  7. write: data and parity to every writable member; a member failing
//     here is failed, the write still succeeds with at most m chunks lost.
//  8. acknowledge only when every member failure marked so far is recorded
//     on the survivors' superblocks (waitFailuresRecorded) and, if a member
//     failed while the write ran, after its group is flushed (its chunks
//     are durable before the failure is taken as journal-covered) and its
//     record retired. A failure that cannot be recorded fails the write.

import (
	"errors"
	"fmt"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// writeMasks is masks plus the positions whose chunk is not durably
// readable (jcp): a crash now would leave them unreadable at assembly, so
// a write must journal them; and the positions on the owner's members
// (owner-domain journaling), which a crash of the owner takes along.
func (v *Volume) writeMasks(group int, row int64) (unreadable, unwritable, journal, owner uint64) {
	for pos := 0; pos < v.geo.Width(); pos++ {
		slot := v.geo.Slot(group, v.geo.MemberOf(row, pos))
		bit := uint64(1) << uint(pos)
		if !v.readable(slot, row) {
			unreadable |= bit
			journal |= bit
		}
		if !v.writable(slot) {
			unwritable |= bit
		}
		if row >= v.slots[slot].jcp.Load() {
			journal |= bit
		}
		if v.slots[slot].owner {
			owner |= bit
		}
	}
	return unreadable, unwritable, journal, owner
}

// WriteAt writes p at off. Both must be multiples of BlockSize. The write
// has completed (visible to reads, parity consistent) when WriteAt
// returns; it is durable after the next Flush. A write that loses more
// than m chunks of a stripe fails with ErrTooManyFailures.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := v.writeAt(p, off)
	v.stats.write.done(t0, int64(n), err)
	return n, err
}

func (v *Volume) writeAt(p []byte, off int64) (int, error) {
	counted, err := v.beginRequest("write", len(p), off)
	if err != nil {
		return 0, err
	}
	defer v.endRequest(counted)
	op := v.newOp()
	defer v.putOp(op)
	reqs := op.split(off, len(p))
	if len(reqs) == 1 {
		err = v.writeStripe(op, p, reqs[0])
	} else {
		for len(reqs) > 0 && err == nil {
			n := min(len(reqs), maxStripesInFlight)
			err = v.writeStripes(p, reqs[:n])
			reqs = reqs[n:]
		}
	}
	if err != nil {
		return 0, fmt.Errorf("write at %d: %w", off, err)
	}
	return len(p), nil
}

// WriteAtFUA writes p at off and makes it durable before returning (a
// Force Unit Access write).
func (v *Volume) WriteAtFUA(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := v.writeAt(p, off)
	if err == nil {
		if err = v.flushMembers(); err == nil {
			err = v.waitFailuresRecorded() // as Flush: a member left out
		}
		if err != nil {
			n = 0
		}
	}
	v.stats.write.done(t0, int64(n), err)
	return n, err
}

// WriteZeroes writes n zero bytes at off. It counts as one write of n
// bytes in IOStats.
func (v *Volume) WriteZeroes(off int64, n int64) error {
	t0 := time.Now()
	err := v.writeZeroes(off, n)
	v.stats.write.done(t0, n, err)
	return err
}

func (v *Volume) writeZeroes(off int64, n int64) error {
	if err := v.geo.CheckRange(off, 0); err != nil || n < 0 || n%layout.BlockSize != 0 {
		return fmt.Errorf("write zeroes [%d, +%d): unaligned or out of range", off, n)
	}
	// The engine never writes into a request buffer, so one zero buffer
	// serves every caller.
	zero := v.zeroes()
	for n > 0 {
		c := min(n, int64(len(zero)))
		if _, err := v.writeAt(zero[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

func (v *Volume) zeroes() []byte {
	v.zeroOnce.Do(func() {
		sb := v.geo.StripeBytes()
		v.zero = make([]byte, max(sb, (1<<20)/sb*sb))
	})
	return v.zero
}

// Discard tells the volume that [off, off+n) is no longer needed. Discard
// is advisory: the range keeps its contents (the engine does not yet pass
// discards to members, since parity would have to follow), so it is cheap
// and always safe.
func (v *Volume) Discard(off int64, n int64) error {
	if err := v.check(); err != nil {
		return err
	}
	if n < 0 || n > 1<<40 {
		return fmt.Errorf("discard: bad length %d", n)
	}
	return v.geo.CheckRange(off, 0)
}

func (v *Volume) writeStripe(op *stripeOp, p []byte, r layout.StripeReq) error {
	region := v.bm.region(r.Row)
	if err := v.bm.begin(region); err != nil {
		return fmt.Errorf("write-intent bitmap: %w", err)
	}
	defer v.bm.end(region)
	lk := v.lockFor(r.Stripe)
	lk.Lock()
	defer lk.Unlock()
	if rs := v.rs.Load(); rs != nil {
		// After an unclean stop the background resync may not have
		// reached this stripe: its parity may be torn. Recompute it from
		// the data before a read-modify-write or a degraded write
		// combines it with anything.
		if err := v.resyncPendingLocked(rs, r.Group, r.Row, v.hooks.skipDemandResync); err != nil {
			return fmt.Errorf("stripe %d: resync: %w", r.Stripe, err)
		}
	}
	return v.writeStripeLocked(op, p, r, 0)
}

// writeStripeLocked plans and performs the write of r, re-planning after
// each read failure, from attempt first on. The caller holds r's
// write-intent bit (bm.begin), its stripe lock, and resynced it.
func (v *Volume) writeStripeLocked(op *stripeOp, p []byte, r layout.StripeReq, first int) error {
	for attempt := first; attempt <= v.geo.Width(); attempt++ {
		if err := v.stopErr(); err != nil {
			return err
		}
		sp, err := v.planStripeWrite(r)
		if err != nil {
			return err
		}
		err = v.execWrite(op, p, r, sp.plan, sp.journal, sp.avoid, sp.gen)
		op.release()
		if op.err != nil {
			return op.err
		}
		if errors.Is(err, errRetry) {
			continue
		}
		return err
	}
	return fmt.Errorf("stripe %d: %w", r.Stripe, ErrTooManyFailures)
}

// stripeWritePlan is a stripe write's plan and what execWrite needs with
// it: the data positions to journal, the positions that must not hold the
// record, the member failure counter when it was made, and the positions
// not readable or not writable (lost).
type stripeWritePlan struct {
	plan                 layout.WritePlan
	journal, avoid, lost uint64
	// stale: data positions journaled because they are not durably in
	// sync (planned as unreadable), as opposed to the owner's.
	stale uint64
	gen   int64
}

// planStripeWrite plans the write of r from the members' roles now.
func (v *Volume) planStripeWrite(r layout.StripeReq) (stripeWritePlan, error) {
	gen := v.failGen.Load()
	unreadable, unwritable, journal, owner := v.writeMasks(r.Group, r.Row)
	lost := unreadable | unwritable
	avoid := journal | unwritable // positions not durably in sync
	var ownerExtra uint64
	if v.jrn == nil {
		journal = 0
	} else {
		// Chunks that are readable now but not durably so (rows a
		// rebuild passed since its last checkpoint) are planned as
		// unreadable: they are reconstructed, so their post-write
		// contents are at hand for the journal.
		journal &= v.geo.DataMask()
		unreadable |= journal
		// The owner's data chunks stay readable: a read-modify-write
		// reads the untouched ones in addition (below), every other
		// mode has them at hand.
		ownerExtra, avoid = v.ownerJournal(owner, avoid, journal)
	}
	plan, err := layout.PlanWrite(v.geo, r, unreadable, unwritable)
	if err != nil {
		return stripeWritePlan{}, err
	}
	if plan.Mode == layout.ModeRMW {
		plan.Read |= ownerExtra &^ r.Touched()
	}
	return stripeWritePlan{plan: plan, journal: journal | ownerExtra, avoid: avoid, lost: lost, stale: journal, gen: gen}, nil
}

// execWrite performs plan. journal is the set of data positions whose
// post-write contents must be journaled before anything is written (zero
// without a journal, or when every data chunk is durably readable and none
// is on the owner's members); avoid is every position that must not hold
// the record (not durably in sync, not writable, or on the owner's
// members); failGen is the member failure counter when the plan was made.
// In RMW mode plan.Read includes the untouched journaled positions.
func (v *Volume) execWrite(op *stripeOp, p []byte, r layout.StripeReq, plan layout.WritePlan,
	journal, avoid uint64, failGen int64) error {
	// Read phase: nothing has been written yet, so a failure can simply
	// be retried with a new plan.
	v.addWriteReads(op, r, plan)
	if !op.run() {
		return errRetry
	}
	if err := v.computeWrite(op, p, r, plan); err != nil {
		return err
	}

	// Journal phase: the stripe is degraded, or has data chunks on the
	// owner's members, and a crash during the write phase would leave
	// parity from which the chunks that cannot be read after it
	// reconstruct to neither their old nor their new contents. Log their
	// contents after this write first (op.shards holds every data
	// position over [Lo, Hi) in every mode but RMW, and in RMW the
	// touched ones and the journaled ones, read above).
	var seq uint64
	if journal != 0 {
		var err error
		seq, err = v.jrn.append(r, journal, op.shards, v.journalSlot(r, avoid), v.epoch.Load())
		if err != nil {
			return err
		}
	}

	// Write phase. Writes go to every writable member; a member failing
	// here leaves the survivors consistent (its chunk is what the new
	// parity implies), so the write succeeds if the stripe still has at
	// most m lost chunks.
	v.addWriteWrites(op, p, r, plan)
	ok := op.run()
	v.journalDone(r, seq)
	return v.finishWrite(op, r, ok, seq, failGen)
}

// addWriteReads adds the read phase of plan: the chunks over [Lo, Hi) it
// needs, into op.shards.
func (v *Volume) addWriteReads(op *stripeOp, r layout.StripeReq, plan layout.WritePlan) {
	g := v.geo
	n := r.Hi - r.Lo
	for pos := 0; pos < g.Width(); pos++ {
		if plan.Read&(1<<uint(pos)) != 0 {
			op.shards[pos] = op.buf(n)
			op.add(v.slotAt(r, pos), false, op.shards[pos], g.MemberOffset(r.Row)+int64(r.Lo))
		}
	}
}

// computeWrite computes parity (and reconstructed data) over [Lo, Hi)
// once the read phase succeeded. Afterwards op.shards holds every data
// position's post-write contents in every mode but RMW, and in RMW the
// touched ones and the journaled ones read in addition, plus parity.
func (v *Volume) computeWrite(op *stripeOp, p []byte, r layout.StripeReq, plan layout.WritePlan) error {
	g := v.geo
	n := r.Hi - r.Lo
	covers := r.CoversHull()
	newData := func(s layout.Seg) []byte { return p[s.BufOff : s.BufOff+int64(s.Len)] }
	if plan.Mode == layout.ModeRMW {
		nd := make([][]byte, g.K)
		for _, s := range r.Segs {
			if covers&(1<<uint(s.Pos)) != 0 {
				nd[s.Pos] = newData(s)
			} else {
				b := op.buf(n)
				copy(b, op.shards[s.Pos])
				copy(b[s.Off-r.Lo:], newData(s))
				nd[s.Pos] = b
			}
		}
		if err := v.enc.Update(op.shards, nd); err != nil {
			return fmt.Errorf("stripe %d: parity update: %w", r.Stripe, err)
		}
		// The old contents are not needed any more.
		for pos, d := range nd {
			if d != nil {
				op.shards[pos] = d
			}
		}
		return nil
	}
	if plan.Mode == layout.ModeDegraded {
		required := make([]bool, g.K)
		for pos := 0; pos < g.K; pos++ {
			if plan.Reconstruct&(1<<uint(pos)) != 0 {
				required[pos] = true
				op.shards[pos] = op.buf(n)[:0]
			}
		}
		for pos := g.K; pos < g.Width(); pos++ {
			if plan.Read&(1<<uint(pos)) == 0 {
				op.shards[pos] = nil
			}
		}
		if err := v.enc.ReconstructSome(op.shards, required); err != nil {
			return fmt.Errorf("stripe %d: reconstruct: %w", r.Stripe, err)
		}
	}
	// Data shards: new data where written, old data elsewhere.
	for _, s := range r.Segs {
		if covers&(1<<uint(s.Pos)) != 0 {
			op.shards[s.Pos] = newData(s)
		} else {
			copy(op.shards[s.Pos][s.Off-r.Lo:], newData(s))
		}
	}
	for pos := g.K; pos < g.Width(); pos++ {
		if op.shards[pos] == nil {
			op.shards[pos] = op.buf(n)
		}
	}
	if err := v.enc.Encode(op.shards); err != nil {
		return fmt.Errorf("stripe %d: encode: %w", r.Stripe, err)
	}
	return nil
}

// addWriteWrites adds the write phase of plan: the new data and the
// computed parity, to every position plan writes.
func (v *Volume) addWriteWrites(op *stripeOp, p []byte, r layout.StripeReq, plan layout.WritePlan) {
	g := v.geo
	mo := g.MemberOffset(r.Row)
	for _, s := range r.Segs {
		if plan.Write&(1<<uint(s.Pos)) != 0 {
			op.add(v.slotAt(r, s.Pos), true, p[s.BufOff:s.BufOff+int64(s.Len)], mo+int64(s.Off))
		}
	}
	for pos := g.K; pos < g.Width(); pos++ {
		if plan.Write&(1<<uint(pos)) != 0 {
			op.add(v.slotAt(r, pos), true, op.shards[pos], mo+int64(r.Lo))
		}
	}
}

// finishWrite ends a stripe write once its write phase ran (ok: every
// member write succeeded; seq: its journal record, or 0, already retired
// from the in-flight set with journalDone): steps 7-8 of the state
// machine. journalDone comes first: a member failure that the read of
// failGen below does not see then retires after it (markFailedLocked
// bumps failGen before the failure's retire reads the in-flight set), so
// that retire covers this record; one that it sees is handled here.
func (v *Volume) finishWrite(op *stripeOp, r layout.StripeReq, ok bool, seq uint64, failGen int64) error {
	g := v.geo
	if op.err != nil {
		// A member failed in the write phase and the failure could
		// not be recorded: after a crash its stale chunk would be
		// trusted, so the write is not acknowledged.
		return op.err
	}
	if !ok {
		unreadable, unwritable := v.masks(r.Group, r.Row)
		if bitsCount(unreadable|unwritable) > g.M {
			return fmt.Errorf("stripe %d: %w", r.Stripe, ErrTooManyFailures)
		}
	}
	if !v.faults.ackBeforeRecorded {
		if err := v.waitFailuresRecorded(); err != nil {
			return err
		}
	}
	if !ok || v.failGen.Load() != failGen {
		// Whoever recorded the failure may have found the volume
		// fenced, or failed it.
		if err := v.stopErr(); err != nil {
			return err
		}
		// A member failed while this write ran, so this write was
		// planned (and not journaled) as if it were in sync, and the
		// metadata write recording the failure may have flushed before
		// this write's chunks landed. Make them durable before the
		// write completes: an assembly after a crash treats the failed
		// member's rows as journaled.
		if err := v.flushGroup(r.Group); err != nil {
			return err
		}
		if seq != 0 {
			// The record lacks the chunk of the member that failed; it
			// is not needed any more (the write is durable), and an
			// assembly would take it for a torn stripe.
			if err := v.jrn.retireThrough(seq); err != nil {
				return err
			}
		}
	}
	return nil
}

// journalDone retires the journal record seq (0: none) of a stripe write
// whose write phase is over from the in-flight set.
func (v *Volume) journalDone(r layout.StripeReq, seq uint64) {
	if seq == 0 {
		return
	}
	if v.hooks.beforeJournalDone != nil {
		v.hooks.beforeJournalDone(r.Stripe)
	}
	v.jrn.done(seq)
}

// waitFailuresRecorded returns once every member failure marked so far is
// recorded on the survivors' superblocks, or an error when that failed. A
// write may have skipped a member because it is marked failed in memory
// (markFailedLocked, under metaMu, before the metadata write): acknowledged
// before the metadata write finished, the write would be lost to an
// assembly after a crash, which would still trust the member's stale
// chunk.
func (v *Volume) waitFailuresRecorded() error {
	gen := v.failGen.Load()
	if v.recordedGen.Load() >= gen {
		return nil
	}
	v.metaMu.Lock() // the recorder holds it until its metadata write is done
	recorded := v.recordedGen.Load() >= gen
	v.metaMu.Unlock()
	if err := v.stopErr(); err != nil {
		return err
	}
	if !recorded {
		return errors.New("member failure not recorded on the superblocks")
	}
	return nil
}

// flushGroup flushes the writable members of group; failures mark them
// failed. See failErrored for the result.
func (v *Volume) flushGroup(group int) error {
	w := v.geo.Width()
	return v.flushWritable(func(slot int) bool { return slot/w == group })
}

// journalSlot picks the member of r's group that receives a journal
// record: one holding a data chunk of the stripe that is durably in sync
// and not on the owner's members (avoid), rotating with the stripe to
// spread the load. A second copy would not help: if that member is lost as
// well, its chunk is missing from the record and the stripe cannot be
// repaired either way. Only when no such data chunk exists (m >= k) does a
// parity member, or any writable one, take the record.
func (v *Volume) journalSlot(r layout.StripeReq, avoid uint64) []int {
	g := v.geo
	for _, span := range []int{g.K, g.Width()} {
		for i := 0; i < span; i++ {
			pos := int((r.Stripe + int64(i)) % int64(span))
			if slot := v.slotAt(r, pos); avoid&(1<<uint(pos)) == 0 && v.writable(slot) {
				return []int{slot}
			}
		}
	}
	for pos := 0; pos < g.Width(); pos++ {
		if slot := v.slotAt(r, pos); v.writable(slot) {
			return []int{slot}
		}
	}
	return nil
}

// journalSlotNear is journalSlot, except that it keeps prev (the member
// that took the previous record of a write run; -1 for none) wherever prev
// may hold r's record: any writable member of r's group whose position is
// not in avoid. Which such member holds a record does not matter to
// replay; keeping one lets a run's records leave as one write.
func (v *Volume) journalSlotNear(r layout.StripeReq, avoid uint64, prev int) []int {
	if prev >= 0 && prev/v.geo.Width() == r.Group && v.writable(prev) {
		for pos := 0; pos < v.geo.Width(); pos++ {
			if v.slotAt(r, pos) == prev && avoid&(1<<uint(pos)) == 0 {
				return []int{prev}
			}
		}
	}
	return v.journalSlot(r, avoid)
}

func bitsCount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}
