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
// the caller's buffer when every chunk read is readable; for a read inside
// one stripe with unreadable chunks (degraded), the readable chunks it
// needs, some into scratch buffers, from which Finish reconstructs the
// rest, holding the stripe's lock shared from PlanRead to Finish as
// readStripe does. The caller performs each one, sets its Err, and calls
// Finish exactly once.
type DirectRead struct {
	IOs []IO

	v       *Volume
	op      *stripeOp
	p       []byte
	off     int64
	t0      time.Time
	counted bool
	// degraded: r is reconstructed by plan under lk (held shared).
	degraded bool
	r        layout.StripeReq
	plan     layout.ReadPlan
	lk       *sync.RWMutex
}

// PlanRead plans a read of len(p) bytes at off whose every chunk is
// readable (the fast path of ReadAt: no locks, no copies). It returns false
// when the read needs ReadAt (a chunk unreadable, a bad range, the volume
// closed or failed); nothing is then held.
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

// planDegraded plans a one-stripe read with unreadable chunks: the
// stripe's lock taken shared without waiting, no resync pending on its
// row, the readable chunks the reconstruction needs. op.ios is empty
// before; on false nothing is held and op is released.
func (d *DirectRead) planDegraded(reqs []layout.StripeReq) bool {
	v, op := d.v, d.op
	op.release()
	if len(reqs) != 1 {
		return false
	}
	r := reqs[0]
	lk := v.lockFor(r.Stripe)
	if !lk.TryRLock() {
		return false
	}
	if rs := v.rs.Load(); rs != nil && rs.needs(r.Stripe, r.Group, r.Row) {
		lk.RUnlock() // readStripe resyncs the row first
		return false
	}
	unreadable, _ := v.masks(r.Group, r.Row)
	plan, err := layout.PlanRead(v.geo, r, unreadable)
	if err != nil || v.stopErr() != nil {
		lk.RUnlock()
		return false
	}
	v.addStripeReads(op, d.p, r, plan)
	d.degraded, d.r, d.plan, d.lk = true, r, plan, lk
	return true
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
	if ok && d.degraded {
		rerr = v.reconstructRead(op, d.p, d.r, d.plan)
	}
	if d.degraded {
		op.release()
		d.lk.RUnlock()
	}
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
	if d.degraded {
		d.op.release()
		d.lk.RUnlock()
	}
	d.v.putOp(d.op)
	d.op, d.IOs = nil, nil
	if d.counted {
		d.v.inflight.Add(-1)
	}
}
