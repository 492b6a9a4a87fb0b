package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabraid/fabraid/engine/superblock"
)

// Progress describes a running background job.
type Progress struct {
	Kind  string // "resync", "rebuild" or "scrub"
	Slots []int  // rebuild targets
	Done  int64  // rows processed (all groups)
	Total int64  // rows to process

	// Rebuild only: how much of its targets it rewrites. CoverBytes is
	// what it must write when it starts: for a target that returned
	// (a resync of the write-intent bitmap's regions) its rows in those
	// regions, for a full-rebuild target all its rows, from its
	// checkpoint on, times the chunk size, summed over the targets.
	// Regions counts the bitmap regions the returning targets' resync
	// sets hold (0 when every target is rebuilt in full); Partial is
	// true when every target is such a resync. Bytes counts what it has
	// written to the targets so far (a row is written to every target of
	// its group, so with targets of different sets in one group it may
	// exceed CoverBytes). MemberBytes is the data area of one member
	// (rows times chunk), to compare with.
	Partial     bool
	Regions     int64
	CoverBytes  int64
	Bytes       int64
	MemberBytes int64
}

// RebuildOptions throttle background work (rebuild, resync, scrub).
type RebuildOptions struct {
	// Rate limits the bytes written (rebuild) or read (scrub) per second;
	// zero means unlimited.
	Rate int64
	// BusyRate is the rate while the volume serves foreground I/O (a
	// request began within the last BusyWindow), when lower than Rate
	// or Rate is unlimited: md's speed_limit_min next to
	// speed_limit_max. Zero: foreground I/O only makes the job yield
	// (YieldDelay).
	BusyRate int64
	// BusyWindow is how long after a foreground request the volume
	// counts as busy; zero means 500 ms.
	BusyWindow time.Duration
	// YieldDelay is how long a worker pauses before each batch while
	// foreground requests are in flight; zero means 200µs, negative never.
	YieldDelay time.Duration
	// Workers is the number of rows (rebuild: runs of rows) processed in
	// parallel; default 2.
	Workers int
	// RunRows is how many consecutive rows a rebuild moves with one member
	// I/O per member: with 64 KiB chunks the default 8 reads and writes
	// 512 KiB at a time, so the per-I/O cost (a system call, a block
	// request, an NVMe/TCP command) is paid once per run. 1: row by row.
	RunRows int
	// CheckpointRows is how often (in rows) the rebuild checkpoint is
	// written to the superblocks; default 1024.
	CheckpointRows int64
}

func (o *RebuildOptions) defaults() {
	if o.YieldDelay == 0 {
		o.YieldDelay = 200 * time.Microsecond
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.RunRows <= 0 {
		o.RunRows = defaultRunRows
	}
	if o.CheckpointRows <= 0 {
		o.CheckpointRows = 1024
	}
	if o.BusyWindow <= 0 {
		o.BusyWindow = 500 * time.Millisecond
	}
}

// throttle paces a job: bytes at the rate that applies when each batch
// asks (rate), and a yield to foreground requests in flight. Time spent
// idle earns no credit: after a pause the job goes on at the rate, not
// faster.
type throttle struct {
	v     *Volume
	o     RebuildOptions
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu     sync.Mutex
	next   time.Time // when the next batch may start
	seen   int64     // v.foreground at the last look
	busyAt time.Time // when foreground I/O was last seen
}

func newThrottle(v *Volume, o RebuildOptions) *throttle {
	t := &throttle{v: v, o: o, now: time.Now, seen: v.foreground.Load()}
	t.sleep = func(ctx context.Context, d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.v.done:
			return ErrClosed
		}
	}
	return t
}

func (t *throttle) wait(ctx context.Context, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-t.v.done:
		return ErrClosed
	default:
	}
	if t.o.YieldDelay > 0 && t.v.inflight.Load() > 0 {
		if err := t.sleep(ctx, t.o.YieldDelay); err != nil {
			return err
		}
	}
	rate := t.rate()
	if rate <= 0 {
		return nil
	}
	t.mu.Lock()
	now := t.now()
	if t.next.Before(now) {
		t.next = now
	}
	due := t.next
	t.next = t.next.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	t.mu.Unlock()
	if d := due.Sub(now); d > 0 {
		return t.sleep(ctx, d)
	}
	return nil
}

// rate is the rate that applies now: BusyRate while foreground requests
// began within BusyWindow (or are in flight), else Rate.
func (t *throttle) rate() int64 {
	if t.o.BusyRate <= 0 || (t.o.Rate > 0 && t.o.Rate <= t.o.BusyRate) {
		return t.o.Rate
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if c := t.v.foreground.Load(); c != t.seen || t.v.inflight.Load() > 0 {
		t.seen, t.busyAt = c, now
	}
	if !t.busyAt.IsZero() && now.Sub(t.busyAt) < t.o.BusyWindow {
		return t.o.BusyRate
	}
	return t.o.Rate
}

// defaultRunRows is RebuildOptions.RunRows' default.
const defaultRunRows = 8

// forRows runs fn on every row of [from, to) for which want reports true,
// with o.Workers workers, in windows so that after each window every row
// below the window's end is done. after is called with the window end.
func (v *Volume) forRows(ctx context.Context, o RebuildOptions, from, to int64,
	want func(row int64) bool, fn func(row int64) error, after func(end int64) error) error {
	return forWindows(ctx, from, to, int64(o.Workers)*16, func(start, end int64) error {
		var rows []int64
		for r := start; r < end; r++ {
			if want(r) {
				rows = append(rows, r)
			}
		}
		return parallel(o.Workers, len(rows), func(i int) error { return fn(rows[i]) })
	}, after)
}

// rowRun is a run of n consecutive rows from row that share a key.
type rowRun struct {
	row int64
	n   int
	key uint64
}

// forRuns is forRows over runs: the rows of [from, to) whose key is not
// zero, cut into runs of at most o.RunRows consecutive rows with equal
// keys, each given to fn whole.
func (v *Volume) forRuns(ctx context.Context, o RebuildOptions, from, to int64,
	key func(row int64) uint64, fn func(r rowRun) error, after func(end int64) error) error {
	return forWindows(ctx, from, to, int64(o.Workers*o.RunRows)*4, func(start, end int64) error {
		var runs []rowRun
		for r := start; r < end; r++ {
			k := key(r)
			if k == 0 {
				continue
			}
			if n := len(runs); n > 0 {
				last := &runs[n-1]
				if last.key == k && last.row+int64(last.n) == r && last.n < o.RunRows {
					last.n++
					continue
				}
			}
			runs = append(runs, rowRun{row: r, n: 1, key: k})
		}
		return parallel(o.Workers, len(runs), func(i int) error { return fn(runs[i]) })
	}, after)
}

// forWindows calls each with the windows of [from, to), then after with
// the window's end, until one fails or ctx is done.
func forWindows(ctx context.Context, from, to, window int64, each func(start, end int64) error, after func(end int64) error) error {
	for start := from; start < to; start += window {
		end := min(to, start+window)
		if err := each(start, end); err != nil {
			return err
		}
		if err := after(end); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs fn(0..n-1) on workers goroutines, worker w taking w,
// w+workers, ...; a worker stops at its first error, the first of which
// (by worker) is returned.
func parallel(workers, n int, fn func(i int) error) error {
	if n == 0 {
		return nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := fn(i); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// resyncParity recomputes the parity of every row in the dirty regions from
// the data (after an unclean stop, and the initial sync). Rows where a data
// chunk cannot be read are left alone; those for which unprotected (nil:
// all) reports that the journal did not cover them are counted: that is
// the write hole documented in docs/engine.md.
func (v *Volume) resyncParity(ctx context.Context, dirty bitset, unprotected func(grp int, row int64, unreadable uint64) bool) error {
	o := RebuildOptions{YieldDelay: -1}
	o.defaults()
	g := v.geo
	var skipped int64
	var mu sync.Mutex
	for grp := 0; grp < g.Groups; grp++ {
		err := v.forRows(ctx, o, 0, g.Rows,
			func(row int64) bool { return dirty.test(row / v.bm.regionRows) },
			func(row int64) error {
				ok, err := v.resyncRow(grp, row)
				if !ok && err == nil && unprotected != nil {
					unreadable, _ := v.masks(grp, row)
					ok = !unprotected(grp, row, unreadable)
				}
				if !ok {
					mu.Lock()
					skipped++
					mu.Unlock()
				}
				return err
			},
			func(int64) error { return nil })
		if err != nil {
			return err
		}
	}
	v.writeHole.Add(skipped)
	if skipped > 0 {
		v.log.Warn("unclean stop while degraded: parity of some stripes could not be recomputed (write hole)",
			"stripes", skipped)
	}
	return nil
}

func (v *Volume) resyncRow(grp int, row int64) (bool, error) {
	lk := v.lockFor(v.geo.StripeOf(grp, row))
	lk.Lock()
	defer lk.Unlock()
	return v.resyncRowLocked(grp, row)
}

// resyncRowLocked recomputes the parity of row of grp from its data; the
// caller holds the stripe lock. It reports false when a data chunk cannot
// be read.
func (v *Volume) resyncRowLocked(grp int, row int64) (bool, error) {
	g := v.geo
	op := v.newOp()
	defer v.putOp(op)
	for attempt := 0; attempt <= g.Width(); attempt++ {
		unreadable, unwritable := v.masks(grp, row)
		if unreadable&g.DataMask() != 0 {
			return false, nil
		}
		mo := g.MemberOffset(row)
		for pos := 0; pos < g.Width(); pos++ {
			op.shards[pos] = op.buf(g.ChunkSize)
			if pos < g.K {
				op.add(v.geo.Slot(grp, g.MemberOf(row, pos)), false, op.shards[pos], mo)
			}
		}
		if !op.run() {
			op.release()
			continue
		}
		if err := v.enc.Encode(op.shards); err != nil {
			return false, err
		}
		for pos := g.K; pos < g.Width(); pos++ {
			if unwritable&(1<<uint(pos)) == 0 {
				op.add(v.geo.Slot(grp, g.MemberOf(row, pos)), true, op.shards[pos], mo)
			}
		}
		op.run()
		return true, nil
	}
	return false, ErrTooManyFailures
}

// startBackground serialises a rebuild or scrub with any other one, marks
// the volume busy with background work and returns the throttle for it;
// the returned func ends the work (progress cleared, lock released).
func (v *Volume) startBackground(o *RebuildOptions) (*throttle, func()) {
	o.defaults()
	v.rebuildMu.Lock()
	v.background.Store(true)
	return newThrottle(v, *o), func() {
		v.background.Store(false)
		v.progress.Store(nil)
		v.rebuildMu.Unlock()
	}
}

// Rebuild brings every rebuilding member (a replacement, or a returning
// member that needs only the regions written while it was away) up to
// date, then marks it active. It runs until done, ctx is cancelled or the
// volume fails; progress is checkpointed in the superblocks, so a later
// Rebuild (after a restart) resumes where this one stopped. Run it in its
// own goroutine; Status().Progress shows how far it got.
func (v *Volume) Rebuild(ctx context.Context, o RebuildOptions) error {
	th, done := v.startBackground(&o)
	defer done()
	g := v.geo
	var targets []int
	for slot := range v.slots {
		if v.slotRole(slot) == superblock.RoleRebuilding && v.dev(slot) != nil {
			targets = append(targets, slot)
		}
	}
	// A target that fails and is replaced while this rebuild runs is a
	// different member: it must not inherit this rebuild's checkpoints.
	devAt := map[int]Member{}
	for _, slot := range targets {
		devAt[slot] = v.dev(slot)
	}
	current := func(slot int) bool {
		return v.slotRole(slot) == superblock.RoleRebuilding && v.dev(slot) == devAt[slot]
	}
	prog := v.rebuildProgress(targets)
	v.progress.Store(prog)
	var written atomic.Int64
	defer func() {
		if len(targets) > 0 {
			p := *v.progress.Load()
			p.Bytes = written.Load()
			v.lastRebuild.Store(&p)
		}
	}()
	for grp := 0; grp < g.Groups; grp++ {
		var tg []int
		from := g.Rows
		for _, slot := range targets {
			if slot/g.Width() == grp {
				tg = append(tg, slot)
				from = min(from, v.slots[slot].checkpoint.Load())
			}
		}
		if len(tg) == 0 {
			continue
		}
		needs := func(slot int, row int64) bool {
			s := &v.slots[slot]
			if v.slotRole(slot) != superblock.RoleRebuilding || row < s.checkpoint.Load() {
				return false
			}
			rs := s.resync.Load()
			return rs == nil || rs.test(row/v.bm.regionRows)
		}
		var lastPersist = from
		// A run's key is the set of targets (bits by index in tg) that
		// lack its rows: a target below its checkpoint, or outside its
		// resync set, already holds the row (a rebuild restarted to take
		// in another member passes such rows again for the newcomer
		// alone), and only the others are written.
		err := v.forRuns(ctx, o, from, g.Rows,
			func(row int64) (key uint64) {
				for i, slot := range tg {
					if needs(slot, row) {
						key |= 1 << uint(i)
					}
				}
				return key
			},
			func(r rowRun) error {
				need := make([]int, 0, len(tg))
				for i, slot := range tg {
					if r.key&(1<<uint(i)) != 0 {
						need = append(need, slot)
					}
				}
				if err := th.wait(ctx, int64(g.ChunkSize*len(need)*r.n)); err != nil {
					return err
				}
				n, err := v.rebuildRun(grp, r, need, current)
				written.Add(n)
				return err
			},
			func(end int64) error {
				for _, slot := range tg {
					if current(slot) && v.slots[slot].checkpoint.Load() < end {
						v.slots[slot].checkpoint.Store(end)
					}
				}
				p := *prog
				p.Done, p.Bytes = int64(grp)*g.Rows+end, written.Load()
				v.progress.Store(&p)
				if end-lastPersist >= o.CheckpointRows || end == g.Rows {
					lastPersist = end
					return v.persistCheckpoints(tg, current, end == g.Rows)
				}
				return nil
			})
		if err != nil {
			v.metaMu.Lock()
			_ = v.persistCheckpointsLocked(tg, current, false)
			v.unlockMeta()
			return fmt.Errorf("rebuild group %d: %w", grp, err)
		}
	}
	return nil
}

func (v *Volume) persistCheckpoints(slots []int, current func(int) bool, done bool) error {
	v.metaMu.Lock()
	defer v.unlockMeta()
	return v.persistCheckpointsLocked(slots, current, done)
}

func (v *Volume) persistCheckpointsLocked(slots []int, current func(int) bool, done bool) error {
	changed := false
	for _, slot := range slots {
		if !current(slot) {
			continue
		}
		m := &v.meta.Members[slot]
		// Flush the rebuilt data before the superblock claims it: the
		// metadata write's own flush comes after its first copy is
		// written, and a crash could keep that copy but lose the data.
		if err := v.dev(slot).Flush(); err != nil {
			v.stats.memberErrors.Add(1)
			v.markIOFailedLocked(slot, fmt.Errorf("rebuild flush: %w", err))
			changed = true
			continue
		}
		if done {
			v.slots[slot].role.Store(uint32(superblock.RoleActive))
			v.slots[slot].resync.Store(nil)
			v.slots[slot].checkpoint.Store(0)
			m.Role, m.Resync, m.Checkpoint = superblock.RoleActive, false, 0
			v.log.Info("member in sync", "slot", slot, "device", v.names[slot])
		} else {
			m.Checkpoint = v.slots[slot].checkpoint.Load()
		}
		changed = true
	}
	if !changed {
		return nil
	}
	return v.writeMetaLocked()
}

// rebuildProgress is the progress of a rebuild of targets that starts
// now: what it has to cover (Progress).
func (v *Volume) rebuildProgress(targets []int) *Progress {
	g := v.geo
	prog := &Progress{Kind: "rebuild", Slots: targets, Total: int64(g.Groups) * g.Rows,
		MemberBytes: g.Rows * int64(g.ChunkSize), Partial: len(targets) > 0}
	for _, slot := range targets {
		s := &v.slots[slot]
		cp := s.checkpoint.Load()
		rs := s.resync.Load()
		if rs == nil {
			prog.Partial = false
			prog.CoverBytes += (g.Rows - cp) * int64(g.ChunkSize)
			continue
		}
		rr := v.bm.regionRows
		for r := rs.next(0); r >= 0; r = rs.next(r + 1) {
			prog.Regions++
			if lo, hi := max(r*rr, cp), min((r+1)*rr, g.Rows); hi > lo {
				prog.CoverBytes += (hi - lo) * int64(g.ChunkSize)
			}
		}
	}
	return prog
}

// rebuildRow recomputes the chunks of targets in row of grp from K other
// readable chunks and writes them. It returns the bytes it wrote to the
// targets.
func (v *Volume) rebuildRow(grp int, row int64, targets []int, current func(int) bool) (int64, error) {
	g := v.geo
	lk := v.lockFor(g.StripeOf(grp, row))
	lk.Lock()
	defer lk.Unlock()
	if rs := v.rs.Load(); rs != nil {
		// The background resync stopped early (it runs before any
		// rebuild): never reconstruct from parity it has not checked.
		if err := v.resyncPendingLocked(rs, grp, row, false); err != nil {
			return 0, err
		}
	}
	op := v.newOp()
	defer v.putOp(op)
	for attempt := 0; attempt <= g.Width(); attempt++ {
		if err := v.stopErr(); err != nil {
			return 0, err
		}
		unreadable, _ := v.masks(grp, row)
		var targetMask uint64
		for _, slot := range targets {
			if current(slot) {
				targetMask |= 1 << uint(g.PosOf(row, slot%g.Width()))
			}
		}
		unreadable |= targetMask
		if bitsCount(unreadable) > g.M {
			return 0, fmt.Errorf("row %d of group %d: %w", row, grp, ErrTooManyFailures)
		}
		mo := g.MemberOffset(row)
		n := 0
		for pos := 0; pos < g.Width() && n < g.K; pos++ {
			if unreadable&(1<<uint(pos)) == 0 {
				op.shards[pos] = op.buf(g.ChunkSize)
				op.add(v.geo.Slot(grp, g.MemberOf(row, pos)), false, op.shards[pos], mo)
				n++
			}
		}
		if !op.run() {
			op.release()
			continue
		}
		required := make([]bool, g.Width())
		for pos := 0; pos < g.Width(); pos++ {
			if targetMask&(1<<uint(pos)) != 0 {
				required[pos] = true
				op.shards[pos] = op.buf(g.ChunkSize)[:0]
			}
		}
		if err := v.enc.ReconstructSome(op.shards, required); err != nil {
			return 0, fmt.Errorf("row %d of group %d: reconstruct: %w", row, grp, err)
		}
		for pos := 0; pos < g.Width(); pos++ {
			if targetMask&(1<<uint(pos)) != 0 {
				op.add(v.geo.Slot(grp, g.MemberOf(row, pos)), true, op.shards[pos], mo)
			}
		}
		if !op.run() { // a failing target is marked failed; nothing to retry
			return 0, nil
		}
		return int64(bitsCount(targetMask) * g.ChunkSize), nil
	}
	return 0, ErrTooManyFailures
}

// rebuildRun rebuilds the rows of r onto need: with one read per source
// member and one write per target when every row of the run has the same
// readable members (tryRebuildRun), else row by row. It returns the bytes
// it wrote to the targets.
func (v *Volume) rebuildRun(grp int, r rowRun, need []int, current func(int) bool) (int64, error) {
	if r.n > 1 {
		if n, ok, err := v.tryRebuildRun(grp, r, need, current); ok || err != nil {
			return n, err
		}
	}
	var written int64
	for row := r.row; row < r.row+int64(r.n); row++ {
		n, err := v.rebuildRow(grp, row, need, current)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// tryRebuildRun rebuilds the rows of r onto the current targets of need,
// holding every stripe of the run: it reads each of K source members'
// chunks of all the rows at once, reconstructs row by row, and writes each
// target's chunks at once. ok is false, with nothing written, when the run
// has fewer than K members readable in all its rows or a source read
// failed (the failed member is recorded): the caller then goes row by row.
func (v *Volume) tryRebuildRun(grp int, r rowRun, need []int, current func(int) bool) (written int64, ok bool, err error) {
	g := v.geo
	defer v.lockRows(grp, r.row, r.n, false)()
	if rs := v.rs.Load(); rs != nil {
		for row := r.row; row < r.row+int64(r.n); row++ {
			if err := v.resyncPendingLocked(rs, grp, row, false); err != nil {
				return 0, false, err
			}
		}
	}
	if err := v.stopErr(); err != nil {
		return 0, false, err
	}
	var targets []int
	for _, slot := range need {
		if current(slot) {
			targets = append(targets, slot)
		}
	}
	if len(targets) == 0 {
		return 0, true, nil
	}
	sources := v.runSources(grp, r, targets)
	if len(sources) < g.K {
		return 0, false, nil
	}
	span := r.n * g.ChunkSize
	bp := v.runBuf((len(sources) + len(targets)) * span)
	defer v.runBufs.Put(bp)
	src, dst := splitSpans(*bp, span, len(sources), len(targets))
	op := v.newOp()
	defer v.putOp(op)
	mo := g.MemberOffset(r.row)
	for i, slot := range sources {
		op.add(slot, false, src[i], mo)
	}
	if !op.run() {
		return 0, false, nil
	}
	for i := range r.n {
		if err := v.reconstructRunRow(grp, r.row+int64(i), i, sources, targets, src, dst, op.shards); err != nil {
			return 0, true, err
		}
	}
	for i, slot := range targets {
		op.add(slot, true, dst[i], mo)
	}
	if !op.run() { // a failing target is marked failed; nothing to retry
		return 0, true, nil
	}
	return int64(len(targets) * span), true, nil
}

// runSources returns K slots of grp, none of them a target, readable in
// every row of r (fewer when there are not K).
func (v *Volume) runSources(grp int, r rowRun, targets []int) []int {
	g := v.geo
	var sources []int
	for mem := 0; mem < g.Width() && len(sources) < g.K; mem++ {
		slot := g.Slot(grp, mem)
		if slices.Contains(targets, slot) {
			continue
		}
		readable := true
		for row := r.row; row < r.row+int64(r.n) && readable; row++ {
			readable = v.readable(slot, row)
		}
		if readable {
			sources = append(sources, slot)
		}
	}
	return sources
}

// reconstructRunRow computes the targets' chunks of row, the i-th row of
// its run, into dst from the sources' chunks in src; shards is scratch of
// the stripe's width.
func (v *Volume) reconstructRunRow(grp int, row int64, i int, sources, targets []int, src, dst [][]byte, shards [][]byte) error {
	g := v.geo
	c := g.ChunkSize
	clear(shards)
	required := make([]bool, g.Width())
	for j, slot := range sources {
		shards[g.PosOf(row, slot-g.Slot(grp, 0))] = src[j][i*c : (i+1)*c]
	}
	for j, slot := range targets {
		pos := g.PosOf(row, slot-g.Slot(grp, 0))
		required[pos] = true
		shards[pos] = dst[j][i*c : i*c : (i+1)*c] // filled in place
	}
	if err := v.enc.ReconstructSome(shards, required); err != nil {
		return fmt.Errorf("row %d of group %d: reconstruct: %w", row, grp, err)
	}
	for j, slot := range targets {
		out, at := shards[g.PosOf(row, slot-g.Slot(grp, 0))], dst[j][i*c:(i+1)*c]
		if &out[0] != &at[0] {
			copy(at, out)
		}
	}
	clear(shards)
	return nil
}

// splitSpans cuts buf into a source and b target spans of span bytes.
func splitSpans(buf []byte, span, a, b int) (src, dst [][]byte) {
	for i := range a + b {
		s := buf[i*span : (i+1)*span : (i+1)*span]
		if i < a {
			src = append(src, s)
		} else {
			dst = append(dst, s)
		}
	}
	return src, dst
}

// runBuf returns an aligned buffer of at least n bytes from v.runBufs.
func (v *Volume) runBuf(n int) *[]byte {
	if bp, _ := v.runBufs.Get().(*[]byte); bp != nil && len(*bp) >= n {
		return bp
	}
	b := AlignedBuffer(n)
	return &b
}

// lockRows locks the stripes of rows [row, row+n) of grp, exclusively or
// shared, and returns their unlock. The lock shards are taken in ascending
// order, each once: every holder of more than one shard takes them that
// way, so two never wait for each other.
func (v *Volume) lockRows(grp int, row int64, n int, shared bool) func() {
	shards := make([]int, 0, n)
	for i := range n {
		shards = append(shards, lockShard(v.geo.StripeOf(grp, row+int64(i))))
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	for _, s := range shards {
		if shared {
			v.locks[s].RLock()
		} else {
			v.locks[s].Lock()
		}
	}
	return func() {
		for i := len(shards) - 1; i >= 0; i-- {
			if shared {
				v.locks[shards[i]].RUnlock()
			} else {
				v.locks[shards[i]].Unlock()
			}
		}
	}
}

// Replace puts dev into the failed slot as a new, empty member and makes it
// a rebuild target; call Rebuild to fill it.
func (v *Volume) Replace(slot int, dev Member, name string) error {
	if err := v.check(); err != nil {
		return err
	}
	if slot < 0 || slot >= len(v.slots) {
		return fmt.Errorf("replace: slot %d out of range", slot)
	}
	size, err := dev.Size()
	if err != nil {
		return fmt.Errorf("replace slot %d with %s: %w", slot, name, err)
	}
	if size < v.base.MinDeviceSize() {
		return fmt.Errorf("replace slot %d with %s: %d bytes, need %d", slot, name, size, v.base.MinDeviceSize())
	}
	v.metaMu.Lock()
	defer v.unlockMeta()
	if r := v.slotRole(slot); r != superblock.RoleFailed {
		return fmt.Errorf("replace slot %d: member is %s, not failed", slot, r)
	}
	if err := v.refuseNewerLocked(dev, name); err != nil {
		return fmt.Errorf("replace slot %d: %w", slot, err)
	}
	if err := v.installLocked(slot, dev, name, false, nil); err != nil {
		return fmt.Errorf("replace slot %d with %s: %w", slot, name, err)
	}
	v.meta.Members[slot].UUID = newUUID()
	return v.writeMetaLocked()
}

// ReAdd puts a returning member (same member UUID, for example after its
// node rebooted) back into its failed slot. Only the regions written while
// it was away — those dirty in the write-intent bitmap — are resynced by
// the next Rebuild; a member that failed on an I/O error, or left while it
// was rebuilt in full, is rebuilt in full. Assembly takes back by itself
// only a member failed as missing or unreachable (FailReason.Returns); for
// the others ReAdd (or Replace) is the only way back.
func (v *Volume) ReAdd(dev Member, name string) error {
	if err := v.check(); err != nil {
		return err
	}
	sb, err := superblock.ReadCopies(dev)
	if err != nil {
		return fmt.Errorf("re-add %s: %w", name, err)
	}
	if sb.VolumeUUID != v.base.VolumeUUID {
		return fmt.Errorf("re-add %s: belongs to volume %x", name, sb.VolumeUUID)
	}
	v.metaMu.Lock()
	defer v.unlockMeta()
	if err := v.refuseNewerLocked(dev, name); err != nil {
		return fmt.Errorf("re-add: %w", err)
	}
	slot := sb.Slot
	if v.meta.Members[slot].UUID != sb.MemberUUID {
		return fmt.Errorf("re-add %s: slot %d now holds another member", name, slot)
	}
	if r := v.slotRole(slot); r != superblock.RoleFailed {
		return fmt.Errorf("re-add %s: slot %d is %s", name, slot, r)
	}
	var early bitset
	if v.faults.readdEarlySnapshot {
		early = v.bm.snapshot()
	}
	// A read error may have hit rows no bitmap bit covers: a member that
	// failed on an I/O error is rebuilt in full, and so is one that left
	// while it was being rebuilt in full (bitmapCovers). One that was
	// unreachable lost its path, not its data.
	returning := v.meta.Members[slot].Failure != superblock.FailIO && bitmapCovers(sb)
	if err := v.installLocked(slot, dev, name, returning, early); err != nil {
		return fmt.Errorf("re-add %s: %w", name, err)
	}
	return v.writeMetaLocked()
}

// installLocked makes dev the rebuilding member of slot: a full rebuild
// target, or, when returning, one whose resync set is the write-intent
// bitmap.
//
// The slot becomes writable (with nothing readable) before the bitmap is
// snapshotted for its resync set: a write planned while the slot was
// still failed skipped it, and such a write set its region's bit before it
// planned, so the bit is in the snapshot. A snapshot taken earlier missed
// the regions first written in between, and reads trusted the member's
// stale chunks there.
// (early is a snapshot taken before the call: a re-introduced bug, for
// checker tests.)
func (v *Volume) installLocked(slot int, dev Member, name string, returning bool, early bitset) error {
	// Give it the current bitmap before it becomes writable.
	for blk := 0; blk < int(v.base.BitmapBytes)/bitmapBlock; blk++ {
		if err := v.memberWrite(dev, v.bm.block(blk), v.base.BitmapOffset+int64(blk)*bitmapBlock); err != nil {
			return err
		}
	}
	if v.jrn != nil {
		if err := v.jrn.install(slot, dev); err != nil {
			return err
		}
	}
	v.slots[slot].jcp.Store(0)
	if old := v.dev(slot); old != nil && old != dev {
		// Requests still in flight on the old member fail; their errors
		// are ignored because the slot no longer holds it.
		_ = old.Close()
	}
	v.slots[slot].dev.Store(&memberRef{dev})
	v.names[slot] = name
	s := &v.slots[slot]
	s.checkpoint.Store(0)
	s.resync.Store(nil) // rebuilding at checkpoint 0 without a resync set: nothing readable
	s.role.Store(uint32(superblock.RoleRebuilding))
	if returning {
		rs := early
		if rs == nil {
			rs = v.bm.snapshot()
		}
		s.resync.Store(&rs)
	}
	m := &v.meta.Members[slot]
	m.Role, m.Resync, m.Checkpoint, m.Failure = superblock.RoleRebuilding, returning, 0, superblock.FailUnrecorded
	return nil
}

// DetachFailed closes the device a failed slot still holds (it failed
// while the volume ran), as mdadm --remove does, so that the drive can be
// opened again for ReAdd. Requests still in flight on it fail; their
// errors are ignored because the slot no longer holds it.
func (v *Volume) DetachFailed(slot int) error {
	if slot < 0 || slot >= len(v.slots) {
		return fmt.Errorf("detach: slot %d out of range", slot)
	}
	v.metaMu.Lock()
	defer v.unlockMeta()
	if r := v.slotRole(slot); r != superblock.RoleFailed {
		return fmt.Errorf("detach slot %d: member is %s, not failed", slot, r)
	}
	if old := v.dev(slot); old != nil {
		v.slots[slot].dev.Store(nil)
		_ = old.Close()
	}
	return nil
}

// ErrWouldLoseGroup refuses an administrator's fail that would leave a
// group with fewer than k members in sync; nothing was changed.
var ErrWouldLoseGroup = errors.New("refused: failing the member would lose its group")

// FailMember marks slot failed by administrator request (mdadm --fail),
// recorded as FailAdmin: the member stays failed across restarts until
// ReAdd or Replace. It refuses with ErrWouldLoseGroup, before anything
// changes, when the slot's group would keep fewer than k members in sync
// (the volume would fail); ForceFailMember fails it anyway.
func (v *Volume) FailMember(slot int) error { return v.failByRequest(slot, false) }

// ForceFailMember is FailMember without the group check: failing the
// member may fail the volume (ErrVolumeFailed).
func (v *Volume) ForceFailMember(slot int) error { return v.failByRequest(slot, true) }

func (v *Volume) failByRequest(slot int, force bool) error {
	if slot < 0 || slot >= len(v.slots) {
		return fmt.Errorf("fail: slot %d out of range", slot)
	}
	v.metaMu.Lock()
	if v.slotRole(slot) != superblock.RoleFailed {
		if err := v.groupLossLocked(slot); err != nil && !force {
			v.metaMu.Unlock()
			return fmt.Errorf("fail slot %d: %w", slot, err)
		}
		v.markFailedLocked(slot, superblock.FailAdmin, errors.New("failed by request"))
		if err := v.writeMetaLocked(); err != nil {
			v.unlockMeta()
			v.log.Error("cannot record member failure", "slot", slot, "err", err)
			return fmt.Errorf("fail slot %d: record failure: %w", slot, err)
		}
	}
	v.unlockMeta()
	if v.failed.Load() {
		return ErrVolumeFailed
	}
	return nil
}

// groupLossLocked reports (ErrWouldLoseGroup, with the group's state) when
// failing slot would leave its group fewer than k members in sync, the
// count markFailedLocked fails the volume by. Callers hold metaMu.
func (v *Volume) groupLossLocked(slot int) error {
	g := v.geo
	grp := slot / g.Width()
	inSync := 0
	var out []string
	for mem := 0; mem < g.Width(); mem++ {
		s := g.Slot(grp, mem)
		switch r := v.slotRole(s); {
		case s == slot:
		case r == superblock.RoleActive:
			inSync++
		default:
			out = append(out, fmt.Sprintf("slot %d %s", s, r))
		}
	}
	if inSync >= g.K {
		return nil
	}
	return fmt.Errorf("%w: group %d would keep %d of %d members in sync (%s), it needs k=%d; nothing changed",
		ErrWouldLoseGroup, grp, inSync, g.Width(), strings.Join(out, ", "), g.K)
}

// ScrubReport is the outcome of a scrub.
type ScrubReport struct {
	Stripes    int64   // stripes verified
	Skipped    int64   // stripes not verifiable (a chunk unreadable)
	Mismatches int64   // stripes whose parity did not match their data
	Repaired   int64   // mismatching stripes whose parity was rewritten
	Examples   []int64 // up to 16 mismatching stripe numbers
}

// Scrub reads every stripe, verifies its parity and, with repair, rewrites
// parity that does not match the data (md's "repair": data is trusted).
func (v *Volume) Scrub(ctx context.Context, repair bool, o RebuildOptions) (ScrubReport, error) {
	th, done := v.startBackground(&o)
	defer done()
	g := v.geo
	var rep ScrubReport
	var mu sync.Mutex
	prog := &Progress{Kind: "scrub", Total: int64(g.Groups) * g.Rows}
	v.progress.Store(prog)
	for grp := 0; grp < g.Groups; grp++ {
		count := func(row int64, verified, bad, fixed bool) {
			mu.Lock()
			defer mu.Unlock()
			if !verified {
				rep.Skipped++
				return
			}
			rep.Stripes++
			if bad {
				rep.Mismatches++
				if len(rep.Examples) < 16 {
					rep.Examples = append(rep.Examples, g.StripeOf(grp, row))
				}
			}
			if fixed {
				rep.Repaired++
			}
		}
		err := v.forRuns(ctx, o, 0, g.Rows, func(int64) uint64 { return 1 },
			func(r rowRun) error {
				if err := th.wait(ctx, int64(g.ChunkSize*g.Width()*r.n)); err != nil {
					return err
				}
				if ok, err := v.tryScrubRun(grp, r, repair, count); ok || err != nil {
					return err
				}
				for row := r.row; row < r.row+int64(r.n); row++ {
					verified, bad, fixed, err := v.scrubRow(grp, row, repair)
					count(row, verified, bad, fixed)
					if err != nil {
						return err
					}
				}
				return nil
			},
			func(end int64) error {
				p := *prog
				p.Done = int64(grp)*g.Rows + end
				v.progress.Store(&p)
				return nil
			})
		if err != nil {
			return rep, fmt.Errorf("scrub: %w", err)
		}
	}
	if rep.Mismatches > 0 {
		v.log.Warn("scrub found parity mismatches", "stripes", rep.Mismatches, "repaired", rep.Repaired)
	}
	return rep, nil
}

// tryScrubRun scrubs the rows of r with one read of every member, holding
// their stripes (exclusively with repair, else shared), and passes each
// row's result to count. ok is false, with nothing counted or written,
// when a row is not verifiable as a whole run (a chunk unreadable, the
// background resync pending, a member read failed): the caller then goes
// row by row.
func (v *Volume) tryScrubRun(grp int, r rowRun, repair bool, count func(row int64, verified, bad, fixed bool)) (ok bool, err error) {
	g := v.geo
	if r.n < 2 {
		return false, nil
	}
	defer v.lockRows(grp, r.row, r.n, !repair)()
	rs := v.rs.Load()
	for row := r.row; row < r.row+int64(r.n); row++ {
		if unreadable, _ := v.masks(grp, row); unreadable != 0 || (rs != nil && rs.needs(g.StripeOf(grp, row), grp, row)) {
			return false, nil
		}
	}
	span := r.n * g.ChunkSize
	bp := v.runBuf(g.Width() * span)
	defer v.runBufs.Put(bp)
	spans, _ := splitSpans(*bp, span, g.Width(), 0)
	op := v.newOp()
	defer v.putOp(op)
	for mem := range g.Width() {
		op.add(g.Slot(grp, mem), false, spans[mem], g.MemberOffset(r.row))
	}
	if !op.run() {
		return false, nil
	}
	c := g.ChunkSize
	for i := range r.n {
		row := r.row + int64(i)
		for mem := range g.Width() {
			op.shards[g.PosOf(row, mem)] = spans[mem][i*c : (i+1)*c]
		}
		good, err := v.enc.Verify(op.shards)
		if err != nil {
			return true, err
		}
		fixed := false
		if !good && repair {
			if err := v.enc.Encode(op.shards); err != nil {
				return true, err
			}
			for pos := g.K; pos < g.Width(); pos++ {
				op.add(g.Slot(grp, g.MemberOf(row, pos)), true, op.shards[pos], g.MemberOffset(row))
			}
			fixed = op.run()
		}
		count(row, true, !good, fixed)
	}
	clear(op.shards)
	return true, nil
}

func (v *Volume) scrubRow(grp int, row int64, repair bool) (verified, bad, fixed bool, err error) {
	g := v.geo
	lk := v.lockFor(g.StripeOf(grp, row))
	rs := v.rs.Load()
	if pending := rs != nil && rs.needs(g.StripeOf(grp, row), grp, row); repair || pending {
		lk.Lock()
		defer lk.Unlock()
		if pending {
			// A scrub that runs before the background resync (it got
			// the background lock first) resyncs the row instead of
			// reporting what the crash tore: that is not damage.
			if err := v.resyncPendingLocked(rs, grp, row, false); err != nil {
				return false, false, false, err
			}
		}
	} else {
		lk.RLock()
		defer lk.RUnlock()
	}
	op := v.newOp()
	defer v.putOp(op)
	unreadable, _ := v.masks(grp, row)
	if unreadable != 0 {
		return false, false, false, nil
	}
	mo := g.MemberOffset(row)
	for pos := 0; pos < g.Width(); pos++ {
		op.shards[pos] = op.buf(g.ChunkSize)
		op.add(v.geo.Slot(grp, g.MemberOf(row, pos)), false, op.shards[pos], mo)
	}
	if !op.run() {
		return false, false, false, nil
	}
	ok, err := v.enc.Verify(op.shards)
	if err != nil {
		return false, false, false, err
	}
	if ok {
		return true, false, false, nil
	}
	if !repair {
		return true, true, false, nil
	}
	if err := v.enc.Encode(op.shards); err != nil {
		return true, true, false, err
	}
	for pos := g.K; pos < g.Width(); pos++ {
		op.add(v.geo.Slot(grp, g.MemberOf(row, pos)), true, op.shards[pos], mo)
	}
	return true, true, op.run(), nil
}
