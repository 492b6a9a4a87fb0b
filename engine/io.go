package engine

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// stripeOp carries the scratch state of one stripe operation.
type stripeOp struct {
	v      *Volume
	bufs   []*[]byte
	ios    []IO
	slots  []int
	shards [][]byte
	reqs   []layout.StripeReq
	segs   []layout.Seg
	err    error // a member failure run could not record: the request fails
}

func (op *stripeOp) buf(n int) []byte {
	b := op.v.getBuf()
	op.bufs = append(op.bufs, b)
	return (*b)[:n]
}

func (op *stripeOp) release() {
	for _, b := range op.bufs {
		op.v.putBuf(b)
	}
	op.bufs = op.bufs[:0]
	op.ios = op.ios[:0]
	op.slots = op.slots[:0]
	clear(op.shards)
}

func (op *stripeOp) add(slot int, write bool, buf []byte, memberOff int64) {
	op.ios = append(op.ios, IO{Dev: op.v.dev(slot), Write: write, Buf: buf, Off: op.v.dataOff + memberOff})
	op.slots = append(op.slots, slot)
}

// run executes the queued I/O and marks the members whose I/O failed as
// failed. It reports whether every I/O succeeded; op.err is set when a
// failure could not be recorded (the request must fail).
func (op *stripeOp) run() bool {
	if len(op.ios) == 0 {
		return true
	}
	op.v.exec.Execute(op.ios)
	return op.collect()
}

// collect ends a batch whose IOs ran: members whose IO failed are failed
// (op.err keeps the first failure that could not be recorded). It reports
// whether every IO succeeded and empties the batch.
func (op *stripeOp) collect() bool {
	ok := true
	for i := range op.ios {
		if op.ios[i].Err != nil {
			ok = false
			if err := op.v.failMemberDev(op.slots[i], op.ios[i].Dev, op.ios[i].Err); err != nil && op.err == nil {
				op.err = err
			}
		}
	}
	op.ios = op.ios[:0]
	op.slots = op.slots[:0]
	return ok
}

func (v *Volume) slotAt(r layout.StripeReq, pos int) int {
	return v.geo.Slot(r.Group, v.geo.MemberOf(r.Row, pos))
}

func (v *Volume) newOp() *stripeOp {
	if op, ok := v.ops.Get().(*stripeOp); ok {
		return op
	}
	return &stripeOp{v: v, shards: make([][]byte, v.geo.Width())}
}

// putOp returns op to the pool; its buffers must have been released.
func (v *Volume) putOp(op *stripeOp) {
	op.release()
	op.reqs = op.reqs[:0]
	op.segs = op.segs[:0]
	op.err = nil
	v.ops.Put(op)
}

// beginRequest checks a request of n bytes at off and, while a rebuild or
// scrub runs in the background, counts it in flight so that the background
// work yields to it; endRequest(counted) must follow.
func (v *Volume) beginRequest(what string, n int, off int64) (counted bool, err error) {
	if err := v.check(); err != nil {
		return false, err
	}
	if err := v.geo.CheckRange(off, n); err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	if v.background.Load() {
		v.inflight.Add(1)
		v.foreground.Add(1)
		return true, nil
	}
	return false, nil
}

// endRequest ends a request begun by beginRequest.
func (v *Volume) endRequest(counted bool) {
	if counted {
		v.inflight.Add(-1)
	}
}

// addDirectReads adds one read per segment of reqs, straight into p, and
// reports true when every chunk touched is readable; on false the IOs added
// so far must not be run.
func (op *stripeOp) addDirectReads(reqs []layout.StripeReq, p []byte) bool {
	v := op.v
	for _, r := range reqs {
		if r.Touched()&v.unreadableMask(r.Group, r.Row) != 0 {
			return false
		}
		for _, s := range r.Segs {
			op.add(v.slotAt(r, s.Pos), false, p[s.BufOff:s.BufOff+int64(s.Len)], v.geo.MemberOffset(r.Row)+int64(s.Off))
		}
	}
	if len(reqs) > 1 {
		op.sortBySlot()
	}
	return true
}

// sortBySlot orders the queued IOs by member slot and offset: a member's
// chunks of consecutive rows are adjacent on it, and the block plug merges
// a bio only into the latest request of its queue, so members that share a
// queue (partitions of one disk) merge only chunks submitted one after
// another.
func (op *stripeOp) sortBySlot() { sort.Sort((*ioOrder)(op)) }

// ioOrder sorts a stripeOp's IOs (with their slots) by slot and offset.
type ioOrder stripeOp

func (o *ioOrder) Len() int { return len(o.ios) }

func (o *ioOrder) Less(i, j int) bool {
	if o.slots[i] != o.slots[j] {
		return o.slots[i] < o.slots[j]
	}
	return o.ios[i].Off < o.ios[j].Off
}

func (o *ioOrder) Swap(i, j int) {
	o.ios[i], o.ios[j] = o.ios[j], o.ios[i]
	o.slots[i], o.slots[j] = o.slots[j], o.slots[i]
}

func (op *stripeOp) split(off int64, n int) []layout.StripeReq {
	op.reqs, op.segs = op.v.geo.SplitAppend(op.reqs[:0], op.segs[:0], off, n)
	return op.reqs
}

// ReadAt reads len(p) bytes at off. Both must be multiples of BlockSize.
// A stripe with more than m unavailable chunks fails the read with
// ErrTooManyFailures; wrong data is never returned.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := v.readAt(p, off)
	v.stats.read.done(t0, int64(n), err)
	return n, err
}

func (v *Volume) readAt(p []byte, off int64) (int, error) {
	counted, err := v.beginRequest("read", len(p), off)
	if err != nil {
		return 0, err
	}
	defer v.endRequest(counted)
	op := v.newOp()
	defer v.putOp(op)
	reqs := op.split(off, len(p))
	// Fast path: every touched chunk readable, one batch of direct reads
	// into p, no locks, no copies.
	if op.addDirectReads(reqs, p) && op.run() {
		return len(p), nil
	}
	if op.err != nil {
		return 0, fmt.Errorf("read at %d: %w", off, op.err)
	}
	op.release()
	if err := v.eachStripe(op, reqs, func(sop *stripeOp, r layout.StripeReq) error {
		return v.readStripe(sop, p, r)
	}); err != nil {
		return 0, fmt.Errorf("read at %d: %w", off, err)
	}
	return len(p), nil
}

// maxStripesInFlight bounds the stripes of one request that run at once.
const maxStripesInFlight = 8

// eachStripe runs fn for every stripe request of reqs, up to
// maxStripesInFlight at once, so that their member I/O rounds overlap
// instead of following each other. The stripes of one request are
// disjoint: each fn takes only its own stripe's lock. op serves the first
// stripe (and owns reqs); the others get ops of their own. It returns the
// first error in reqs' order; every fn has returned by then.
func (v *Volume) eachStripe(op *stripeOp, reqs []layout.StripeReq, fn func(*stripeOp, layout.StripeReq) error) error {
	if len(reqs) == 1 {
		return fn(op, reqs[0])
	}
	errs := make([]error, len(reqs))
	var next atomic.Int64
	work := func(sop *stripeOp) {
		for i := next.Add(1) - 1; i < int64(len(reqs)); i = next.Add(1) - 1 {
			errs[i] = fn(sop, reqs[i])
			sop.release()
			sop.err = nil
		}
	}
	var wg sync.WaitGroup
	for range min(len(reqs), maxStripesInFlight) - 1 {
		wg.Go(func() {
			sop := v.newOp()
			defer v.putOp(sop)
			work(sop)
		})
	}
	work(op)
	wg.Wait()
	return firstError(errs)
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readStripe reads one stripe request, reconstructing unavailable chunks.
// It holds the stripe's lock shared so that no write changes the stripe
// between reading the chunks a reconstruction combines.
//
// A row the background resync has not reached may have parity torn by the
// crash: it is resynced first, as a write does, or, when a data chunk
// cannot be read, counted as a write hole (Status().WriteHoleStripes,
// logged) before its reconstruction is returned.
func (v *Volume) readStripe(op *stripeOp, p []byte, r layout.StripeReq) error {
	lk := v.lockFor(r.Stripe)
	if rs := v.rs.Load(); rs != nil && rs.needs(r.Stripe, r.Group, r.Row) {
		lk.Lock()
		err := v.resyncPendingLocked(rs, r.Group, r.Row, false)
		lk.Unlock()
		if err != nil {
			return fmt.Errorf("stripe %d: resync: %w", r.Stripe, err)
		}
	}
	lk.RLock()
	defer lk.RUnlock()
	for attempt := 0; attempt <= v.geo.Width(); attempt++ {
		if err := v.stopErr(); err != nil {
			return err
		}
		unreadable, _ := v.masks(r.Group, r.Row)
		plan, err := layout.PlanRead(v.geo, r, unreadable)
		if err != nil {
			return err
		}
		if err := v.execRead(op, p, r, plan); err != nil {
			op.release()
			if op.err != nil {
				return op.err
			}
			if errors.Is(err, errRetry) {
				continue
			}
			return err
		}
		op.release()
		return nil
	}
	return fmt.Errorf("stripe %d: %w", r.Stripe, ErrTooManyFailures)
}

var errRetry = errors.New("retry")

func segFor(r layout.StripeReq, pos int) (layout.Seg, bool) {
	for _, s := range r.Segs {
		if s.Pos == pos {
			return s, true
		}
		if s.Pos > pos {
			break
		}
	}
	return layout.Seg{}, false
}

func (v *Volume) execRead(op *stripeOp, p []byte, r layout.StripeReq, plan layout.ReadPlan) error {
	v.addStripeReads(op, p, r, plan)
	if !op.run() {
		return errRetry
	}
	return v.reconstructRead(op, p, r, plan)
}

// addStripeReads adds the member reads of plan: the directly readable
// segments into p, the reconstruction's inputs over [Lo, Hi) into
// op.shards.
func (v *Volume) addStripeReads(op *stripeOp, p []byte, r layout.StripeReq, plan layout.ReadPlan) {
	mo := v.geo.MemberOffset(r.Row)
	n := plan.Hi - plan.Lo
	for _, s := range r.Segs {
		if plan.Direct&(1<<uint(s.Pos)) != 0 {
			op.add(v.slotAt(r, s.Pos), false, p[s.BufOff:s.BufOff+int64(s.Len)], mo+int64(s.Off))
			if plan.Read&(1<<uint(s.Pos)) != 0 && s.Off == plan.Lo && s.Len == n {
				op.shards[s.Pos] = p[s.BufOff : s.BufOff+int64(n)]
			}
		}
	}
	for pos := 0; pos < v.geo.Width(); pos++ {
		if plan.Read&(1<<uint(pos)) != 0 && op.shards[pos] == nil {
			op.shards[pos] = op.buf(n)
			op.add(v.slotAt(r, pos), false, op.shards[pos], mo+int64(plan.Lo))
		}
	}
}

// reconstructRead fills p's segments of plan's unreadable positions once
// its reads succeeded.
func (v *Volume) reconstructRead(op *stripeOp, p []byte, r layout.StripeReq, plan layout.ReadPlan) error {
	if plan.Reconstruct == 0 {
		return nil
	}
	n := plan.Hi - plan.Lo
	required := make([]bool, v.geo.K)
	for _, s := range r.Segs {
		if plan.Reconstruct&(1<<uint(s.Pos)) == 0 {
			continue
		}
		required[s.Pos] = true
		if s.Off == plan.Lo && s.Len == n {
			op.shards[s.Pos] = p[s.BufOff : s.BufOff : s.BufOff+int64(n)] // reconstruct in place
		} else {
			op.shards[s.Pos] = op.buf(n)[:0]
		}
	}
	if err := v.enc.ReconstructSome(op.shards, required); err != nil {
		return fmt.Errorf("stripe %d: reconstruct: %w", r.Stripe, err)
	}
	for _, s := range r.Segs {
		if plan.Reconstruct&(1<<uint(s.Pos)) != 0 && !(s.Off == plan.Lo && s.Len == n) {
			copy(p[s.BufOff:s.BufOff+int64(s.Len)], op.shards[s.Pos][s.Off-plan.Lo:])
		}
	}
	return nil
}
