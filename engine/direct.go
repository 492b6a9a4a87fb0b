package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// DirectRead is a read planned for a caller that submits the member reads
// itself, such as a ublk queue thread on its own io_uring (no hand-off to
// another goroutine per request). IOs are the member reads: straight into
// the caller's buffer when every chunk read is readable; for a read with
// unreadable chunks (degraded) over at most maxDegradedStripes stripes,
// the readable chunks each stripe needs, some into scratch buffers, from
// which Finish reconstructs the rest, holding each stripe's lock shared
// from PlanRead to Finish as readStripe does. The caller performs each
// one, sets its Err, and calls Finish exactly once.
type DirectRead struct {
	IOs []IO

	v       *Volume
	op      *stripeOp
	p       []byte
	off     int64
	t0      time.Time
	counted bool
	// parts: a degraded read, one part per stripe, each reconstructed by
	// its plan under its lock (held shared from PlanRead to Finish).
	parts []degradedPart
}

// degradedPart is one stripe of a planned degraded read. op holds the
// stripe's shards and scratch buffers; its IOs are copied into the
// DirectRead's batch.
type degradedPart struct {
	r    layout.StripeReq
	plan layout.ReadPlan
	lk   *sync.RWMutex
	op   *stripeOp
}

// maxDegradedStripes bounds the stripes of one planned degraded read: as
// many as ReadAt runs at once.
const maxDegradedStripes = maxStripesInFlight

// PlanRead plans a read of len(p) bytes at off: healthy as ReadAt's fast
// path (no locks, no copies), or degraded (see DirectRead). It returns
// false when the read needs ReadAt (a stripe held by a writer or with a
// resync pending, more than maxDegradedStripes stripes with a chunk
// unreadable, a bad range, the volume closed or failed); nothing is then
// held.
func (v *Volume) PlanRead(p []byte, off int64) (*DirectRead, bool) {
	if v.check() != nil || v.geo.CheckRange(off, len(p)) != nil {
		return nil, false
	}
	// The member reads count as a batch through the freeze gate (Finish
	// or Cancel ends it): a frozen volume plans none (ReadAt then holds
	// the read at the gate), and Freeze waits for those in flight.
	if !v.gate.tryEnter() {
		return nil, false
	}
	op := v.newOp()
	reqs := op.split(off, len(p))
	d := &DirectRead{v: v, op: op, p: p, off: off, t0: time.Now()}
	if !op.addDirectReads(reqs, p) && !d.planDegraded(reqs) {
		v.putOp(op)
		v.gate.exit()
		return nil, false
	}
	d.IOs = op.ios
	if v.background.Load() {
		v.inflight.Add(1) // a rebuild or scrub yields to it, as to ReadAt
		v.foreground.Add(1)
		d.counted = true
	}
	return d, true
}

// planDegraded plans a read with unreadable chunks as one batch: for
// each stripe (ascending), its lock taken shared without waiting, no
// resync pending on its row, the readable chunks its reconstruction needs;
// the batch sorted by member and offset, so that a member's chunks of
// consecutive rows go out one after another and merge in its queue.
// op.ios is empty before; on false nothing is held and op is released.
func (d *DirectRead) planDegraded(reqs []layout.StripeReq) bool {
	op := d.op
	op.release()
	if len(reqs) > maxDegradedStripes {
		return false
	}
	for _, r := range reqs {
		part, ok := d.planStripe(r)
		if !ok {
			d.dropParts()
			return false
		}
		d.parts = append(d.parts, part)
		op.ios = append(op.ios, part.op.ios...)
		op.slots = append(op.slots, part.op.slots...)
	}
	if len(reqs) > 1 {
		op.sortBySlot()
	}
	return true
}

// planStripe plans stripe request r of a degraded read (see planDegraded).
func (d *DirectRead) planStripe(r layout.StripeReq) (degradedPart, bool) {
	v := d.v
	lk := v.lockFor(r.Stripe)
	if !lk.TryRLock() {
		return degradedPart{}, false
	}
	if rs := v.rs.Load(); rs != nil && rs.needs(r.Stripe, r.Group, r.Row) {
		lk.RUnlock() // readStripe resyncs the row first
		return degradedPart{}, false
	}
	unreadable, _ := v.masks(r.Group, r.Row)
	plan, err := layout.PlanRead(v.geo, r, unreadable)
	if err != nil || v.stopErr() != nil {
		lk.RUnlock()
		return degradedPart{}, false
	}
	sop := v.newOp()
	v.addStripeReads(sop, d.p, r, plan)
	return degradedPart{r: r, plan: plan, lk: lk, op: sop}, true
}

// dropParts releases the parts' buffers and locks.
func (d *DirectRead) dropParts() {
	for _, pt := range d.parts {
		d.v.putOp(pt.op)
		pt.lk.RUnlock()
	}
	d.parts = nil
}

// Finish completes the read once every IO's Err is set. Members whose read
// failed are marked failed (before the read returns), and the read is then
// redone by ReadAt's general path, which reconstructs their chunks; so the
// result is what ReadAt would have returned. Finish blocks only in that
// case.
func (d *DirectRead) Finish() (int, error) {
	v, op := d.v, d.op
	v.gate.exit() // the member reads are done
	ok := true
	for i := range op.ios {
		if op.ios[i].Err != nil {
			ok = false
			v.failMemberDev(op.slots[i], op.ios[i].Dev, op.ios[i].Err)
		}
	}
	var rerr error
	for _, pt := range d.parts {
		if !ok || rerr != nil {
			break
		}
		rerr = v.reconstructRead(pt.op, d.p, pt.r, pt.plan)
	}
	d.dropParts()
	v.putOp(op)
	d.op, d.IOs = nil, nil
	n, err := len(d.p), rerr
	if err != nil {
		n, err = 0, fmt.Errorf("read at %d: %w", d.off, err)
	}
	if !ok {
		n, err = v.readAt(d.p, d.off)
	}
	if d.counted {
		v.inflight.Add(-1)
	}
	v.stats.read.done(d.t0, int64(n), err)
	return n, err
}

// Cancel drops a planned read that the caller will not perform (nothing
// was submitted); it is not counted.
func (d *DirectRead) Cancel() {
	d.v.gate.exit()
	d.dropParts()
	d.v.putOp(d.op)
	d.op, d.IOs = nil, nil
	if d.counted {
		d.v.inflight.Add(-1)
	}
}
