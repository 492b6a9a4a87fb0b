package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// resyncState tracks the parity resync after an unclean stop while it runs
// in the background (docs/engine.md, "Background resync"). Until a row of a
// dirty region is resynced its parity may not match its data (a write torn
// by the crash), so nothing may combine that parity with data: a write
// resyncs the row first, under its stripe lock (resyncPendingLocked).
type resyncState struct {
	dirty      bitset // regions dirty at assembly; immutable
	regionRows int64
	regions    int64
	// cursor[grp]: every row of grp below it is resynced (advanced only
	// after a whole window of rows completed).
	cursor []atomic.Int64
	mu     sync.Mutex
	done   map[int64]bool // stripes at or above their cursor already resynced
	// unprotected reports whether a row whose parity cannot be
	// recomputed (a data chunk unreadable) may be torn (write hole).
	unprotected func(grp int, row int64, unreadable uint64) bool
	rowsDone    atomic.Int64
	total       int64
}

func newResyncState(v *Volume, dirty bitset, unprotected func(int, int64, uint64) bool) *resyncState {
	g := v.geo
	rs := &resyncState{dirty: dirty.clone(), regionRows: v.bm.regionRows, regions: dirty.count(),
		cursor: make([]atomic.Int64, g.Groups), done: map[int64]bool{}, unprotected: unprotected}
	for r := int64(0); r < v.bm.n; r++ {
		if dirty.test(r) {
			rs.total += min(g.Rows, (r+1)*rs.regionRows) - r*rs.regionRows
		}
	}
	rs.total *= int64(g.Groups)
	return rs
}

// needs reports whether row of grp (stripe) still waits for its resync.
func (rs *resyncState) needs(stripe int64, grp int, row int64) bool {
	if !rs.dirty.test(row/rs.regionRows) || row < rs.cursor[grp].Load() {
		return false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return !rs.done[stripe]
}

func (rs *resyncState) markDone(stripe int64) {
	rs.mu.Lock()
	rs.done[stripe] = true
	rs.mu.Unlock()
}

// advance records that every row of grp below end is resynced.
func (rs *resyncState) advance(v *Volume, grp int, end int64) {
	rs.cursor[grp].Store(end)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for s := range rs.done {
		if g, row := v.geo.Locate(s); g == grp && row < end {
			delete(rs.done, s)
		}
	}
}

// remaining counts the dirty regions some group's resync has not passed.
func (rs *resyncState) remaining() int64 {
	low := int64(-1)
	for i := range rs.cursor {
		if c := rs.cursor[i].Load(); low < 0 || c < low {
			low = c
		}
	}
	var n int64
	for r := rs.dirty.next(0); r >= 0; r = rs.dirty.next(r + 1) {
		if (r+1)*rs.regionRows > low {
			n++
		}
	}
	return n
}

// pendingRegion reports whether region r still waits for the resync: its
// bit must not be cleared.
func (rs *resyncState) pendingRegion(r int64) bool { return rs.dirty.test(r) }

// resyncPendingLocked resyncs row of grp if the background resync has not
// reached it yet. The caller holds the stripe lock (exclusive). A row with
// an unreadable data chunk cannot be resynced; it is counted as a write
// hole when unprotected says so, exactly as the resync at assembly does.
func (v *Volume) resyncPendingLocked(rs *resyncState, grp int, row int64, skip bool) error {
	stripe := v.geo.StripeOf(grp, row)
	if !rs.needs(stripe, grp, row) {
		return nil
	}
	if !skip {
		ok, err := v.resyncRowLocked(grp, row)
		if err != nil {
			return err
		}
		if !ok {
			v.countHole(rs, grp, row)
		}
	}
	rs.markDone(stripe)
	return nil
}

func (v *Volume) countHole(rs *resyncState, grp int, row int64) {
	unreadable, _ := v.masks(grp, row)
	if rs.unprotected == nil || rs.unprotected(grp, row, unreadable) {
		if v.writeHole.Add(1) == 1 {
			v.log.Warn("parity of a stripe dirty at the unclean stop could not be recomputed (write hole)",
				"stripe", v.geo.StripeOf(grp, row))
		}
	}
}

// resyncBackground runs the resync of rs as a background task (serialised
// with rebuild and scrub, throttled, stopped by Close or Abandon). Once
// every row is resynced and flushed the state is dropped: from then on the
// regions' bits may be cleared lazily by Flush. If it stops early, the
// bits stay set and the next assembly resyncs again.
func (v *Volume) resyncBackground(rs *resyncState, o RebuildOptions, gate <-chan struct{}) {
	defer v.resyncWG.Done()
	defer close(v.resyncDone)
	if gate != nil {
		select {
		case <-gate:
		case <-v.done:
			return
		}
	}
	th, done := v.startBackground(&o)
	defer done()
	g := v.geo
	prog := &Progress{Kind: "resync", Total: rs.total}
	v.progress.Store(prog)
	ctx := context.Background()
	for grp := 0; grp < g.Groups; grp++ {
		err := v.forRows(ctx, o, 0, g.Rows,
			func(row int64) bool { return rs.dirty.test(row / rs.regionRows) },
			func(row int64) error {
				if err := th.wait(ctx, int64(g.ChunkSize*g.Width())); err != nil {
					return err
				}
				if err := v.stopErr(); err != nil {
					return err
				}
				lk := v.lockFor(g.StripeOf(grp, row))
				lk.Lock()
				defer lk.Unlock()
				rs.rowsDone.Add(1)
				return v.resyncPendingLocked(rs, grp, row, false)
			},
			func(end int64) error {
				rs.advance(v, grp, end)
				p := *prog
				p.Done = rs.rowsDone.Load()
				v.progress.Store(&p)
				return nil
			})
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				v.log.Error("background resync stopped; the dirty regions stay marked and are resynced at the next assembly",
					"err", err)
			}
			return
		}
	}
	// The recomputed parity is durable before any bit may be cleared.
	if err := v.flushMembers(); err != nil {
		v.log.Error("background resync: flush", "err", err)
		return
	}
	// Every stripe is consistent now: the owner's members may be recorded
	// as journal-covered, before the resync counts as finished
	// (WaitResync returns once rs is nil).
	if err := v.recordOwnerJournal(); err != nil {
		v.log.Error("background resync: record owner-domain journaling", "err", err)
	}
	v.rs.Store(nil)
	v.log.Info("resync after unclean stop finished", "regions", rs.regions)
}

// ResyncPending reports whether the resync after an unclean stop is still
// running (or stopped early): some dirty regions' parity is not yet
// trusted.
func (v *Volume) ResyncPending() bool { return v.rs.Load() != nil }

// WaitResync waits until the background resync after an unclean stop has
// finished or stopped (Close, Abandon, an error) or ctx is done. It returns
// nil when no resync is pending any more.
func (v *Volume) WaitResync(ctx context.Context) error {
	if v.rs.Load() == nil {
		return nil
	}
	select {
	case <-v.resyncDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	if v.rs.Load() != nil {
		return errors.New("resync after unclean stop did not finish; the next assembly resyncs again")
	}
	return nil
}
