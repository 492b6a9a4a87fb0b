package engine

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

var longRun = flag.Bool("engine.long", false, "run the long randomized engine model test")

// testSeed returns the seed from FABRAID_TEST_SEED or a fresh one, and logs
// it so that a failure can be reproduced:
//
//	FABRAID_TEST_SEED=<seed> go test ./engine -run TestModel
func testSeed(t testing.TB) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FABRAID_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FABRAID_TEST_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("FABRAID_TEST_SEED=%d", seed)
	return seed
}

// modelEnv runs a volume against an in-memory reference image.
type modelEnv struct {
	t     *testing.T
	rng   *rand.Rand
	cfg   Config
	opts  Options
	hooks testHooks
	size  int64 // member size
	v     *Volume
	mm    []*MemMember // by slot
	model []byte       // what reads must return
	// pending[block] lists the values a block may hold after a crash: its
	// value at the last flush and every value written since.
	pendMu  sync.Mutex
	pending map[int64][][]byte
	log     []string
	// gate holds the background resync of the last assembly until the
	// next phase's I/O is under way (nil: not gated).
	gate chan struct{}
	// torn: the last crash dropped unflushed writes, so stripes may be
	// torn until the background resync has finished; a member lost
	// before that is a write hole (docs/engine.md), which the model
	// cannot predict block by block, so no member is failed then.
	torn bool
	// duringResync: the last phase ran I/O while the resync was pending.
	duringResync bool
	// hot lists the blocks written but not flushed at the last crash
	// (their stripes may be torn) while the resync is pending: workers
	// aim single-block writes (read-modify-write) at them.
	hot []int64
	// failedSince: a member was failed since the last assembly (the
	// background resync then counts unsynced rows as write holes).
	failedSince bool
}

// resyncPending reports whether the background resync still runs.
func (e *modelEnv) resyncPending() bool {
	if e.torn && !e.v.ResyncPending() {
		e.torn = false
	}
	return e.v.ResyncPending()
}

// mayFail reports whether losing a member now is covered by the model.
func (e *modelEnv) mayFail() bool { return !(e.torn && e.resyncPending()) }

func (e *modelEnv) logf(format string, args ...any) {
	e.log = append(e.log, fmt.Sprintf(format, args...))
}

func (e *modelEnv) fatalf(format string, args ...any) {
	e.t.Helper()
	n := len(e.log)
	e.t.Logf("last events:\n%s", joinLast(e.log, 30))
	_ = n
	e.t.Fatalf(format, args...)
}

func joinLast(s []string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}

func (e *modelEnv) notePending(off int64, n int) {
	e.pendMu.Lock()
	defer e.pendMu.Unlock()
	for b := off / layout.BlockSize; b < (off+int64(n))/layout.BlockSize; b++ {
		if _, ok := e.pending[b]; !ok {
			e.pending[b] = [][]byte{bytes.Clone(e.model[b*layout.BlockSize : (b+1)*layout.BlockSize])}
		}
	}
}

func (e *modelEnv) recordWritten(off int64, p []byte) {
	e.pendMu.Lock()
	defer e.pendMu.Unlock()
	for i := 0; i < len(p); i += layout.BlockSize {
		b := (off + int64(i)) / layout.BlockSize
		e.pending[b] = append(e.pending[b], bytes.Clone(p[i:i+layout.BlockSize]))
	}
}

// worker does random reads and writes inside [lo, hi) of the volume.
func (e *modelEnv) worker(rng *rand.Rand, lo, hi int64, ops int) error {
	var hot []int64
	for _, b := range e.hot {
		if b*layout.BlockSize >= lo && (b+1)*layout.BlockSize <= hi {
			hot = append(hot, b*layout.BlockSize)
		}
	}
	for i := 0; i < ops; i++ {
		blocks := (hi - lo) / layout.BlockSize
		off := lo + rng.Int64N(blocks)*layout.BlockSize
		maxN := min((hi-off)/layout.BlockSize, 3*e.v.geo.StripeBytes()/layout.BlockSize)
		n := int(1+rng.Int64N(maxN)) * layout.BlockSize
		if len(hot) > 0 && rng.IntN(2) == 0 {
			off, n = hot[rng.IntN(len(hot))], layout.BlockSize
		} else if rng.IntN(3) == 0 {
			// Whole-stripe aligned writes exercise the full-stripe path.
			sb := e.v.geo.StripeBytes()
			if a := (off / sb) * sb; a >= lo && a+sb <= hi {
				off, n = a, int(sb)
			}
		}
		switch rng.IntN(3) {
		case 0:
			got := make([]byte, n)
			if _, err := e.v.ReadAt(got, off); err != nil {
				return fmt.Errorf("read %d+%d: %w", off, n, err)
			}
			if !bytes.Equal(got, e.model[off:off+int64(n)]) {
				return fmt.Errorf("read %d+%d returned wrong data (first diff at %d)", off, n, firstDiff(got, e.model[off:]))
			}
		default:
			p := make([]byte, n)
			for j := 0; j < n; j += 8 {
				v := rng.Uint64()
				for k := 0; k < 8; k++ {
					p[j+k] = byte(v >> (8 * k))
				}
			}
			e.notePending(off, n)
			if _, err := e.v.WriteAt(p, off); err != nil {
				return fmt.Errorf("write %d+%d: %w", off, n, err)
			}
			copy(e.model[off:], p)
			e.recordWritten(off, p)
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// phase runs concurrent workers over interleaved slices of the volume
// (slice edges are not stripe aligned, so workers share stripes), while
// optionally failing a member and running a rebuild concurrently.
func (e *modelEnv) phase(ops int) {
	const workers = 3
	size := e.v.Size()
	per := size / workers / layout.BlockSize * layout.BlockSize
	if !e.resyncPending() {
		e.hot = nil
	}
	if e.duringResync = e.resyncPending(); e.duringResync {
		e.logf("io-during-resync (%d regions)", e.v.Status().ResyncRegions)
	}
	var wg sync.WaitGroup
	errs := make([]error, workers+1)
	for w := 0; w < workers; w++ {
		lo := int64(w) * per
		hi := lo + per
		if w == workers-1 {
			hi = size
		}
		seed := e.rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = e.worker(rand.New(rand.NewPCG(seed, 1)), lo, hi, ops)
		}()
	}
	if e.gate != nil {
		// Release the resync while the workers run.
		gate, delay := e.gate, time.Duration(e.rng.IntN(3000))*time.Microsecond
		e.gate = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			close(gate)
		}()
	}
	if failNow := e.rng.IntN(4) == 0 || (e.duringResync && e.rng.IntN(2) == 0); failNow {
		if slot := e.pickFailable(); slot >= 0 {
			if e.v.ResyncPending() {
				e.logf("fail-during-resync slot %d", slot)
			} else {
				e.logf("fail slot %d during I/O", slot)
			}
			e.failedSince = true
			wg.Add(1)
			delay := time.Duration(e.rng.IntN(2000)) * time.Microsecond
			go func() {
				defer wg.Done()
				time.Sleep(delay)
				e.mm[slot].SetFailed(true)
			}()
		}
	}
	if e.rebuilding() && e.rng.IntN(2) == 0 {
		e.logf("rebuild during I/O")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[workers] = e.v.Rebuild(context.Background(), RebuildOptions{CheckpointRows: 5, YieldDelay: -1})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.fatalf("phase: %v", err)
		}
	}
}

func (e *modelEnv) rebuilding() bool {
	for _, m := range e.v.Status().Members {
		if m.Role == superblock.RoleRebuilding {
			return true
		}
	}
	return false
}

// lostInGroup counts members of grp that are not fully in sync, or whose
// MemMember is failed but not yet noticed.
func (e *modelEnv) lostInGroup(grp int) int {
	g := e.v.geo
	st := e.v.Status()
	n := 0
	for mem := 0; mem < g.Width(); mem++ {
		slot := g.Slot(grp, mem)
		if st.Members[slot].Role != superblock.RoleActive || e.isFailed(slot) {
			n++
		}
	}
	return n
}

func (e *modelEnv) isFailed(slot int) bool {
	_, err := e.mm[slot].Size()
	b := make([]byte, 1)
	_, rerr := e.mm[slot].ReadAt(b, 0)
	return err != nil || rerr != nil
}

// pickFailable returns an in-sync slot whose loss keeps its group within m
// failures, or -1.
func (e *modelEnv) pickFailable() int {
	g := e.v.geo
	if !e.mayFail() {
		return -1
	}
	grp := e.rng.IntN(g.Groups)
	if e.lostInGroup(grp) >= g.M {
		return -1
	}
	for tries := 0; tries < 10; tries++ {
		slot := g.Slot(grp, e.rng.IntN(g.Width()))
		if e.v.Status().Members[slot].Role == superblock.RoleActive && !e.isFailed(slot) {
			return slot
		}
	}
	return -1
}

func (e *modelEnv) verifyAll(what string) {
	got := make([]byte, e.v.Size())
	if _, err := e.v.ReadAt(got, 0); err != nil {
		e.fatalf("%s: read all: %v", what, err)
	}
	if i := firstDiff(got, e.model); i >= 0 {
		e.fatalf("%s: volume differs from model at byte %d (block %d)", what, i, int64(i)/layout.BlockSize)
	}
}

func (e *modelEnv) flush() {
	if err := e.v.Flush(); err != nil {
		e.fatalf("flush: %v", err)
	}
	e.pending = map[int64][][]byte{}
}

// crash drops a random subset of unflushed member writes and reassembles.
// Blocks written since the last flush may hold any value written since;
// every other block must be intact.
func (e *modelEnv) crash() {
	if e.rng.IntN(3) == 0 {
		// Nothing unflushed: the regions stay dirty (bits are cleared
		// lazily), but no stripe is torn, so members may fail during
		// the background resync.
		e.flush()
	}
	if e.unnoticedFailure() {
		// A member that failed without the volume noticing is lost
		// together with the crash as far as the volume knows: writes
		// to its stripes were not journaled (docs/engine.md, what
		// stays unprotected). Let the volume notice first. Crashes of
		// degraded volumes with unflushed writes are covered by the
		// stripe journal.
		e.flush()
	}
	what := "crash"
	// Stripes torn by an earlier crash stay torn until a resync has
	// finished.
	stillTorn := e.torn && e.resyncPending()
	if e.v.ResyncPending() {
		what = "crash-during-resync"
	}
	e.logf("%s (pending blocks %d)", what, len(e.pending))
	e.v.Abandon()
	var devs []Member
	var names []string
	for slot, m := range e.mm {
		m.Crash(func() bool { return e.rng.IntN(2) == 0 })
		m.Reopen()
		if e.isFailed(slot) {
			if e.rng.IntN(2) == 0 {
				continue // still gone
			}
			e.logf("slot %d returns at restart", slot)
			m.SetFailed(false)
		}
		devs = append(devs, m)
		names = append(names, fmt.Sprintf("slot%d", slot))
	}
	e.rng.Shuffle(len(devs), func(i, j int) { devs[i], devs[j] = devs[j], devs[i]; names[i], names[j] = names[j], names[i] })
	opts, hooks := e.opts, e.hooks
	switch e.rng.IntN(8) {
	case 0:
		opts.SyncResync = true
	case 1:
		// Run unthrottled as soon as it can.
	default:
		// Slow enough that the next phase's I/O and failures, and
		// maybe the next crash, hit it in the middle.
		g := e.v.geo
		opts.Resync = RebuildOptions{Workers: 1, Rate: int64(g.ChunkSize*g.Width()) * int64(200+e.rng.IntN(2000))}
		if e.rng.IntN(2) == 0 {
			e.gate = make(chan struct{})
			hooks.resyncGate = e.gate
		}
	}
	v, err := assemble(devs, names, opts, hooks)
	if err != nil {
		e.fatalf("reassemble: %v", err)
	}
	e.v = v
	e.torn = stillTorn || len(e.pending) > 0
	e.failedSince = false
	if n := v.Status().WriteHoleStripes; n != 0 && !e.hooks.journalOff {
		e.fatalf("after crash: %d write-hole stripes although no member was lost with the crash", n)
	}
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil {
		e.fatalf("read after crash: %v", err)
	}
	for b := int64(0); b < v.Size()/layout.BlockSize; b++ {
		blk := got[b*layout.BlockSize : (b+1)*layout.BlockSize]
		cands, ok := e.pending[b]
		if !ok {
			if !bytes.Equal(blk, e.model[b*layout.BlockSize:(b+1)*layout.BlockSize]) {
				e.fatalf("after crash: flushed block %d lost", b)
			}
			continue
		}
		found := false
		for _, c := range cands {
			if bytes.Equal(c, blk) {
				found = true
				break
			}
		}
		if !found {
			e.fatalf("after crash: block %d holds a value never written (%d candidates)", b, len(cands))
		}
		copy(e.model[b*layout.BlockSize:], blk)
	}
	e.hot = e.hot[:0]
	if v.ResyncPending() {
		for b := range e.pending {
			e.hot = append(e.hot, b)
		}
		slices.Sort(e.hot)
	}
	e.pending = map[int64][][]byte{}
}

// unnoticedFailure reports whether a member failed that the volume still
// counts as active or rebuilding.
func (e *modelEnv) unnoticedFailure() bool {
	for slot, m := range e.v.Status().Members {
		if m.Role != superblock.RoleFailed && e.isFailed(slot) {
			return true
		}
	}
	return false
}

func (e *modelEnv) allInSync() bool {
	for slot, m := range e.v.Status().Members {
		if m.Role != superblock.RoleActive || e.isFailed(slot) {
			return false
		}
	}
	return true
}

func (e *modelEnv) step() {
	g := e.v.geo
	if e.duringResync && e.rng.IntN(3) == 0 && e.v.ResyncPending() {
		e.crash() // in the middle of the resync
		return
	}
	if e.duringResync && e.rng.IntN(4) != 0 {
		// (Otherwise the step below may crash or fail a member in
		// the middle of the resync.) Writes ran while the resync was pending: once it has
		// finished, parity must match everywhere (a write that did
		// read-modify-write against parity torn by the crash leaves a
		// mismatch the resync no longer sees).
		e.duringResync = false
		if err := e.v.WaitResync(context.Background()); err != nil {
			e.fatalf("wait for resync: %v", err)
		}
		if n := e.v.Status().WriteHoleStripes; n != 0 && !e.failedSince && !e.hooks.journalOff {
			e.fatalf("background resync: %d write-hole stripes although no member was lost", n)
		}
		if e.allInSync() {
			rep, err := e.v.Scrub(context.Background(), false, RebuildOptions{})
			if err != nil || rep.Mismatches != 0 {
				e.fatalf("scrub after background resync: %+v %v", rep, err)
			}
			e.logf("scrub after resync ok (%d stripes)", rep.Stripes)
		}
	}
	switch e.rng.IntN(10) {
	case 0, 1:
		e.logf("flush")
		e.flush()
	case 2:
		if slot := e.pickFailable(); slot >= 0 {
			e.logf("fail slot %d", slot)
			e.failedSince = true
			e.mm[slot].SetFailed(true)
		}
	case 3:
		// Lose a whole failure domain when every group can afford it.
		if !e.mayFail() {
			return
		}
		dom := fmt.Sprintf("node%d", e.rng.IntN(e.domains()))
		for grp := 0; grp < g.Groups; grp++ {
			n := 0
			for mem := 0; mem < g.Width(); mem++ {
				if e.cfg.Domains[g.Slot(grp, mem)] == dom && !e.isFailed(g.Slot(grp, mem)) {
					n++
				}
			}
			if e.lostInGroup(grp)+n > g.M {
				return
			}
		}
		e.logf("lose domain %s", dom)
		for slot, d := range e.cfg.Domains {
			if d == dom {
				e.failedSince = true
				e.mm[slot].SetFailed(true)
			}
		}
	case 4:
		e.crash()
	case 5, 6:
		// Replace or re-add a failed member, then maybe rebuild now.
		st := e.v.Status()
		for slot, m := range st.Members {
			if m.Role != superblock.RoleFailed {
				continue
			}
			if e.rng.IntN(2) == 0 {
				e.logf("replace slot %d", slot)
				nm := NewMemMember(e.size)
				if err := e.v.Replace(slot, nm, "replacement"); err != nil {
					e.fatalf("replace: %v", err)
				}
				e.mm[slot] = nm
			} else {
				e.logf("re-add slot %d", slot)
				old := e.mm[slot]
				old.Crash(func() bool { return e.rng.IntN(2) == 0 }) // its node rebooted
				old.Reopen()
				old.SetFailed(false)
				if err := e.v.ReAdd(old, "returned"); err != nil {
					e.fatalf("re-add: %v", err)
				}
			}
			break
		}
		if e.rng.IntN(2) == 0 && e.rebuilding() {
			e.logf("rebuild")
			if err := e.v.Rebuild(context.Background(), RebuildOptions{CheckpointRows: 3}); err != nil {
				e.fatalf("rebuild: %v", err)
			}
		}
	case 7:
		if e.allInSync() {
			rep, err := e.v.Scrub(context.Background(), false, RebuildOptions{})
			if err != nil || rep.Mismatches != 0 {
				e.fatalf("scrub: %+v %v", rep, err)
			}
			e.logf("scrub ok (%d stripes)", rep.Stripes)
		}
	default:
		e.verifyAll("verify")
	}
}

func (e *modelEnv) domains() int {
	return (e.cfg.K + e.cfg.M + e.cfg.M - 1) / e.cfg.M
}

// TestModel is the model-based randomized test: concurrent random reads and
// writes against a reference image, with member failures (up to m per
// group, including whole domains), replacements and returns with rebuild,
// crashes and restarts. Every read must equal the model; after a crash,
// flushed data must be intact and unflushed blocks must hold a value that
// was written.
func TestModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	runs, steps, ops := 3, 25, 15
	if *longRun {
		runs, steps, ops = 40, 120, 40
	}
	if testing.Short() {
		runs, steps = 2, 15
	}
	for run := 0; run < runs; run++ {
		k := 2 + rng.IntN(4)
		m := 1 + rng.IntN(3)
		cfg := Config{
			Name: fmt.Sprintf("model%d", run), K: k, M: m, Groups: 1 + rng.IntN(2),
			ChunkSize: 4096 << rng.IntN(2), RegionSize: 32 << 10, DataOffset: 256 << 10,
			FixedParity: rng.IntN(2) == 0, // the owner-parity layout half of the time
		}
		nodes := (k + m + m - 1) / m
		for grp := 0; grp < cfg.Groups; grp++ {
			for mem := 0; mem < k+m; mem++ {
				cfg.Domains = append(cfg.Domains, fmt.Sprintf("node%d", mem%nodes))
			}
		}
		size := int64(256<<10) + int64(cfg.ChunkSize)*int64(8+rng.IntN(24))
		t.Run(fmt.Sprintf("%d+%dx%d/chunk%d/fixed%v", k, m, cfg.Groups, cfg.ChunkSize, cfg.FixedParity), func(t *testing.T) {
			g := layout.Geometry{K: k, M: m, Groups: cfg.Groups, FixedParity: cfg.FixedParity}
			mm, devs := memMembers(g.Members(), size)
			opts := Options{Logger: quietLogger()}
			hooks := testHooks{journalOff: os.Getenv("FABRAID_TEST_NO_JOURNAL") != "",
				skipDemandResync: os.Getenv("FABRAID_TEST_SKIP_DEMAND_RESYNC") != ""}
			if rng.IntN(2) == 0 {
				opts.Executor = ParallelExecutor{}
			}
			v, err := create(cfg, devs, nil, opts, hooks)
			if err != nil {
				t.Fatal(err)
			}
			e := &modelEnv{t: t, rng: rng, cfg: cfg, opts: opts, hooks: hooks, size: size, v: v, mm: mm,
				model: make([]byte, v.Size()), pending: map[int64][][]byte{}}
			for s := 0; s < steps; s++ {
				e.phase(ops)
				e.step()
			}
			e.verifyAll("final")
			counts := map[string]int{}
			for _, l := range e.log {
				w := l
				if i := bytes.IndexAny([]byte(l), " ("); i > 0 {
					w = l[:i]
				}
				counts[w]++
			}
			t.Logf("events: %v", counts)
			if err := e.v.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
		})
	}
}
