package engine

import (
	"time"
)

// DirectRead is a healthy read planned for a caller that submits the
// member reads itself, such as a ublk queue thread on its own io_uring
// (no hand-off to another goroutine per request). IOs are the member reads,
// straight into the caller's buffer; the caller performs each one, sets its
// Err, and calls Finish exactly once.
type DirectRead struct {
	IOs []IO

	v       *Volume
	op      *stripeOp
	p       []byte
	off     int64
	t0      time.Time
	counted bool
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
	if !op.addDirectReads(op.split(off, len(p)), p) {
		v.putOp(op)
		v.gate.exit()
		return nil, false
	}
	d := &DirectRead{IOs: op.ios, v: v, op: op, p: p, off: off, t0: time.Now()}
	if v.background.Load() {
		v.inflight.Add(1) // a rebuild or scrub yields to it, as to ReadAt
		v.foreground.Add(1)
		d.counted = true
	}
	return d, true
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
	v.putOp(op)
	d.op, d.IOs = nil, nil
	n, err := len(d.p), error(nil)
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
	d.v.putOp(d.op)
	d.op, d.IOs = nil, nil
	if d.counted {
		d.v.inflight.Add(-1)
	}
}
