package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// The schedule checker runs a few concurrent actors (writers, a flusher, an
// administrator doing FailMember, ReAdd, Replace and Rebuild) against a
// small volume whose members are hooked: every member I/O waits until a
// seeded scheduler releases it. The scheduler waits until every goroutine
// is blocked (in a member I/O, or on a lock or channel), then releases one
// pending I/O, fails it (the member is lost from then on) or cuts the
// power (every pending and later I/O fails; each member keeps a random
// subset of its unflushed writes). Afterwards it checks every block
// against a naive model of acknowledged writes and flushes: live, or after
// the cut and a reassembly; then with every stripe's parity verified
// (scrub), then after losing members up to m. A failing seed replays with
// FABRAID_SCHED_SEED=<seed> (the choices are replayed exactly; the engine's
// own goroutine timing is not, so a rare seed may take another path).

// schedOp is a member I/O waiting for the scheduler.
type schedOp struct {
	op     memOp
	arrive int
	resume chan error
}

// scheduler releases hooked member I/O one at a time.
type scheduler struct {
	mu        sync.Mutex
	active    bool // I/O waits for the scheduler; otherwise it passes
	pending   []*schedOp
	arrived   int
	cut       bool
	dead      map[int]bool // members that fail every I/O
	actors    sync.WaitGroup
	live      atomic.Int32
	steps     int
	trace     func(format string, args ...any) // nil: no trace
	onFail    func()                           // called when an I/O is failed
	rank      []int                            // rank of (member, kind) I/O; lower goes first
	reshuffle int                              // steps between reshuffles of rank
	onCut     func()                           // called at the power cut, every goroutine parked
	cutStep   int
	// Takeover schedules (takeover_test.go); zero in single-owner ones.
	width     int                    // members per owner in rank
	onStep    func(idle bool) bool   // called every step under mu (idle: nothing pending for a while); true: re-quiesce
	onRelease func(p *schedOp) error // decides the result of a released I/O (nil: none), under mu
	cutArmed  func() bool            // the planned cut may fall now (nil: always)
}

func newScheduler() *scheduler { return &scheduler{dead: map[int]bool{}} }

func (s *scheduler) hook(op memOp) error {
	if op.after {
		return nil
	}
	s.mu.Lock()
	switch {
	case s.cut:
		s.mu.Unlock()
		return errPowerCut
	case s.dead[op.slot]:
		s.mu.Unlock()
		return ErrMemberIO
	case !s.active:
		s.mu.Unlock()
		return nil
	}
	p := &schedOp{op: op, arrive: s.arrived, resume: make(chan error, 1)}
	s.arrived++
	s.pending = append(s.pending, p)
	s.mu.Unlock()
	return <-p.resume
}

// spawn runs fn as an actor.
func (s *scheduler) spawn(fn func()) {
	s.actors.Add(1)
	s.live.Add(1)
	go func() {
		defer s.actors.Done()
		defer s.live.Add(-1)
		fn()
	}()
}

// quiescent waits until no goroutine but the caller is running or
// runnable: every other one waits for a member I/O, a lock or a channel.
func quiescent(buf []byte) []byte {
	for {
		runtime.Gosched()
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		busy := false
		self := true
		for _, line := range strings.Split(string(buf), "\n") {
			if !strings.HasPrefix(line, "goroutine ") {
				continue
			}
			if self { // the first one is the caller
				self = false
				continue
			}
			if !parked(line) {
				busy = true
				break
			}
		}
		buf = buf[:cap(buf)]
		if !busy {
			return buf
		}
	}
}

// rankOf returns the scheduling rank of op's (member, kind).
func (s *scheduler) rankOf(op memOp) int {
	kind := 0
	switch {
	case op.flush:
		kind = 2
	case op.write && op.off >= 256<<10:
		kind = 1
	case op.write:
		kind = 3 // metadata: superblock, bitmap, journal
	}
	return s.rank[((op.owner*s.width+op.slot)*4+kind)%len(s.rank)]
}

// parked reports whether a goroutine header line ("goroutine 7 [chan
// receive]:") names a state that only another goroutine ends.
func parked(header string) bool {
	i := strings.IndexByte(header, '[')
	if i < 0 {
		return false
	}
	state := header[i+1:]
	for _, p := range []string{"chan ", "select", "semacquire", "sync.", "sleep", "IO wait", "finalizer wait", "GC worker (idle)", "force gc (idle)"} {
		if strings.HasPrefix(state, p) {
			return true
		}
	}
	return false
}

// run drives the actors until they all returned. Each step releases,
// fails or power-cuts; failOK reports whether slot may be lost now and
// records it when it returns true; cutAt is the step of the power cut
// (-1: none).
func (s *scheduler) run(t *testing.T, rng *rand.Rand, failOK func(slot int) bool, cutAt int) {
	buf := make([]byte, 64<<10)
	idle := 0
	for {
		buf = quiescent(buf)
		s.mu.Lock()
		if s.live.Load() == 0 {
			s.mu.Unlock()
			break
		}
		if s.onStep != nil && s.onStep(len(s.pending) == 0 && idle >= 50) {
			s.mu.Unlock()
			idle = 0
			continue
		}
		if len(s.pending) == 0 {
			s.mu.Unlock()
			if idle++; idle < 1000 {
				// A goroutine the stack dump showed parked may have
				// been woken since; only a lasting state is a deadlock.
				continue
			}
			n := runtime.Stack(buf[:cap(buf)], true)
			t.Fatalf("deadlock: %d actors blocked with no member I/O pending\n%s", s.live.Load(), buf[:n])
		}
		idle = 0
		slices.SortFunc(s.pending, func(a, b *schedOp) int {
			if c := a.op.slot - b.op.slot; c != 0 {
				return c
			}
			if a.op.off != b.op.off {
				return int(a.op.off - b.op.off)
			}
			return a.arrive - b.arrive
		})
		s.steps++
		// Mostly the pending I/O of the best-ranked (member, kind), so
		// that other I/O stays in flight across whole operations; the
		// ranks are reshuffled at a few random steps (as in PCT).
		if s.steps%s.reshuffle == 0 {
			s.rank = rng.Perm(len(s.rank))
		}
		i := rng.IntN(len(s.pending))
		if rng.IntN(4) != 0 {
			for j, p := range s.pending {
				if s.rankOf(p.op) < s.rankOf(s.pending[i].op) {
					i = j
				}
			}
		}
		p := s.pending[i]
		// The power fails at the cut step or, with a cut planned, right
		// before a flush (when a cache holds unflushed writes).
		if cutAt >= 0 && (s.cutArmed == nil || s.cutArmed()) && (s.steps >= cutAt || p.op.flush && rng.IntN(6) == 0) {
			s.cut = true
			if s.onCut != nil {
				s.onCut()
			}
			for _, p := range s.pending {
				p.resume <- errPowerCut
			}
			s.pending = nil
			s.cutStep = s.steps
			s.mu.Unlock()
			continue
		}
		s.pending = slices.Delete(s.pending, i, i+1)
		var err error
		if s.onRelease != nil {
			err = s.onRelease(p)
		}
		if err == nil && rng.IntN(25) == 0 && failOK(p.op.slot) {
			s.dead[p.op.slot] = true
			err = ErrMemberIO
			if s.onFail != nil {
				s.onFail()
			}
		}
		s.mu.Unlock()
		if s.trace != nil {
			s.trace("step %d: %s -> %v", s.steps, p.op, err)
		}
		p.resume <- err
	}
	s.actors.Wait()
	s.mu.Lock()
	s.active = false
	s.mu.Unlock()
}

// schedWrite is one write (or flush) as the model sees it: logical start
// and end times, and whether it was acknowledged.
type schedWrite struct {
	id         int
	off        int64
	n          int
	start, end int64
	acked      bool
	fua        bool
	owner      int // 1: a new owner's (takeover_test.go)
	// untrusted: acknowledged by an old owner after the new owner began
	// to assemble; the new owner may or may not see it.
	untrusted bool
}

// schedModel is the naive model: every write and flush with its times.
type schedModel struct {
	mu      sync.Mutex
	clock   atomic.Int64
	writes  []*schedWrite
	flushes []*schedWrite // acked flushes only
	initial []byte
	// failures are the logical time spans in which members failed (an
	// injected I/O error, a FailMember call).
	failures []*schedWrite
	waived   int
}

// openWindow reports whether block b may hold anything after a power cut:
// a write to its stripe was in flight while a member failed, and was not
// durable at the cut. Such a write was planned with the member in sync
// (not journaled), the failure may be recorded before its chunks were
// durable, and the assembly then reconstructs the failed member's chunk
// from a torn stripe without counting a write hole (docs/engine.md, open
// windows). Callers hold mu.
func (m *schedModel) openWindow(b int64, k int) bool {
	s := b / int64(k)
	for _, w := range m.writes {
		first, last := w.off/layout.BlockSize/int64(k), (w.off+int64(w.n)-1)/layout.BlockSize/int64(k)
		if s < first || s > last || m.durable(w) {
			continue
		}
		for _, f := range m.failures {
			if w.start < f.end && (!w.acked && w.end == 0 || w.end > f.start) {
				return true
			}
		}
	}
	return false
}

// blockValue is the contents write id gives volume block b.
func blockValue(id int, b int64) []byte {
	p := make([]byte, layout.BlockSize)
	for i := 0; i < len(p); i += 16 {
		p[i], p[i+1], p[i+2], p[i+3] = byte(id), byte(id>>8), byte(b), byte(b>>8)
		p[i+4] = 0xa5
	}
	return p
}

func (m *schedModel) durable(w *schedWrite) bool {
	if !w.acked || w.untrusted {
		return false
	}
	if w.fua {
		return true
	}
	for _, f := range m.flushes {
		if f.start > w.end {
			return true
		}
	}
	return false
}

// allowed returns the values block b may hold (nil: anything): after a power cut
// (afterCut) every write not superseded by a durable one that started
// after it ended, and the initial value unless a durable write covers the
// block; live, the same with "acknowledged" for "durable".
func (m *schedModel) allowed(b int64, afterCut bool, k int) [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if afterCut && !openWindows && m.openWindow(b, k) {
		m.waived++
		return nil
	}
	settled := func(w *schedWrite) bool {
		if afterCut {
			return m.durable(w)
		}
		return w.acked && !w.untrusted
	}
	var ws []*schedWrite
	for _, w := range m.writes {
		if w.off/layout.BlockSize <= b && b < (w.off+int64(w.n))/layout.BlockSize {
			ws = append(ws, w)
		}
	}
	var out [][]byte
	initial := true
	for _, w := range ws {
		if settled(w) {
			initial = false
		}
		superseded := false
		for _, o := range ws {
			if o != w && settled(o) && o.start > w.end {
				superseded = true
				break
			}
		}
		if !superseded {
			out = append(out, blockValue(w.id, b))
		}
	}
	if initial {
		out = append(out, m.initial[b*layout.BlockSize:(b+1)*layout.BlockSize])
	}
	return out
}

// schedCase is one seeded schedule.
type schedCase struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	f      faults
	cfg    Config
	g      layout.Geometry
	size   int64
	s      *scheduler
	hm     []*hookMember
	v      *Volume
	model  *schedModel
	lost   map[int]bool  // slots not in sync or gone, by the scheduler's count
	extra  []*hookMember // replacements
	cutErr error         // what bitmapCoversCache found at the power cut
	cutAt  int
	taint  map[int64]bool // stripes not checked (takeover_test.go)
	events []string
	errs   []error // unexpected errors of actors
	// ownerErrOK reports whether errors of the old owner's actors are
	// expected now (takeover_test.go; nil: never).
	ownerErrOK func() bool
	emu        sync.Mutex
}

func (c *schedCase) logf(format string, args ...any) {
	c.emu.Lock()
	c.events = append(c.events, fmt.Sprintf(format, args...))
	c.emu.Unlock()
}

func (c *schedCase) fail(format string, args ...any) error {
	return fmt.Errorf("seed %d: %s\nevents:\n  %s", c.seed, fmt.Sprintf(format, args...), strings.Join(c.events, "\n  "))
}

func (c *schedCase) actorErr(what string, err error) {
	if err == nil || errors.Is(err, errPowerCut) {
		return
	}
	c.s.mu.Lock()
	cut, died := c.s.cut, len(c.s.dead) > 0
	c.s.mu.Unlock()
	if cut {
		return // anything may fail once the power is gone
	}
	if died && what != "write" && what != "flush" {
		return // a re-add, replace or rebuild whose target died
	}
	c.emu.Lock()
	c.errs = append(c.errs, fmt.Errorf("%s: %w", what, err))
	c.emu.Unlock()
}

// canLose reports whether slot may be lost (and records it): its group
// keeps at most m members out of sync.
func (c *schedCase) canLose(slot int) bool {
	c.emu.Lock()
	defer c.emu.Unlock()
	if c.lost[slot] {
		return true
	}
	if len(c.lost) >= c.g.M {
		return false
	}
	c.lost[slot] = true
	c.events = append(c.events, fmt.Sprintf("lose slot %d (I/O error)", slot))
	return true
}

func (c *schedCase) write(id int, off int64, n int, fua bool) {
	c.writeTo(c.v, 0, id, off, n, fua)
}

// writeTo is write through owner's volume v.
func (c *schedCase) writeTo(v *Volume, owner, id int, off int64, n int, fua bool) {
	p := make([]byte, 0, n)
	for b := off / layout.BlockSize; b < (off+int64(n))/layout.BlockSize; b++ {
		p = append(p, blockValue(id, b)...)
	}
	w := &schedWrite{id: id, off: off, n: n, fua: fua, owner: owner}
	m := c.model
	m.mu.Lock()
	m.writes = append(m.writes, w)
	m.mu.Unlock()
	w.start = m.clock.Add(1)
	var err error
	if fua {
		_, err = v.WriteAtFUA(p, off)
	} else {
		_, err = v.WriteAt(p, off)
	}
	end := m.clock.Add(1)
	m.mu.Lock()
	w.end, w.acked = end, err == nil
	m.mu.Unlock()
	c.logf("owner %d: write %d [%d,+%d) fua=%v: %v", owner, id, off/layout.BlockSize, n/layout.BlockSize, fua, err)
	c.ownerErr(owner, "write", err)
}

func (c *schedCase) flush() { c.flushOn(c.v, 0) }

// flushOn is flush through owner's volume v.
func (c *schedCase) flushOn(v *Volume, owner int) {
	m := c.model
	f := &schedWrite{start: m.clock.Add(1), owner: owner}
	err := v.Flush()
	f.end = m.clock.Add(1)
	if err == nil {
		m.mu.Lock()
		m.flushes = append(m.flushes, f)
		m.mu.Unlock()
	}
	c.logf("owner %d: flush: %v", owner, err)
	c.ownerErr(owner, "flush", err)
}

// ownerErr is actorErr for an actor of owner (ownerErrOK: an old owner's
// errors once it was fenced are expected).
func (c *schedCase) ownerErr(owner int, what string, err error) {
	if owner == 0 && c.ownerErrOK != nil && c.ownerErrOK() {
		return
	}
	c.actorErr(what, err)
}

// setup creates the volume, writes the initial pattern, flushes twice (the
// bits are clean) and maybe fails one member first.
func (c *schedCase) setup() (prefailed int) {
	rng := c.rng
	c.g = layout.Geometry{K: 2 + rng.IntN(2), M: 1 + rng.IntN(2), Groups: 1, ChunkSize: layout.BlockSize, FixedParity: rng.IntN(2) == 0}
	rows := int64(4 + rng.IntN(3))
	c.cfg = Config{Name: "sched", K: c.g.K, M: c.g.M, ChunkSize: layout.BlockSize,
		RegionSize: int64(layout.BlockSize) << rng.IntN(2), DataOffset: 256 << 10, AssumeZeroed: true, FixedParity: c.g.FixedParity}
	c.size = c.cfg.DataOffset + rows*layout.BlockSize
	c.s = newScheduler()
	if os.Getenv("FABRAID_SCHED_TRACE") != "" {
		c.s.trace = c.logf
	}
	var devs []Member
	c.hm, devs = hookMembers(c.g.Width(), c.size, c.s.hook)
	opts := Options{Logger: quietLogger()}
	if rng.IntN(2) == 0 {
		opts.Executor = ParallelExecutor{}
	}
	v, err := Create(c.cfg, devs, nil, opts)
	if err != nil {
		c.t.Fatal(err)
	}
	v.setFaults(c.f)
	c.v = v
	c.g = v.Geometry()
	c.logf("setup: %d+%d, %d rows, region %d rows, executor %T", c.g.K, c.g.M, c.g.Rows, v.bm.regionRows, v.exec)
	c.model = &schedModel{initial: make([]byte, v.Size())}
	for b := int64(0); b < v.Size()/layout.BlockSize; b++ {
		copy(c.model.initial[b*layout.BlockSize:], blockValue(0xffff, b))
	}
	if _, err := v.WriteAt(c.model.initial, 0); err != nil {
		c.t.Fatal(err)
	}
	// One flush leaves the bits set (idle: the next flush clears them),
	// two clear them.
	for range 1 + rng.IntN(2) {
		if err := v.Flush(); err != nil {
			c.t.Fatal(err)
		}
	}
	prefailed = -1
	if rng.IntN(2) == 0 {
		prefailed = rng.IntN(c.g.Width())
		if err := v.FailMember(prefailed); err != nil {
			c.t.Fatal(err)
		}
		c.lost[prefailed] = true
		c.logf("setup: fail slot %d", prefailed)
	}
	return prefailed
}

// actors starts the schedule's actors.
func (c *schedCase) actors(prefailed int) {
	rng := c.rng
	blocks := c.v.Size() / layout.BlockSize
	id := 1
	for w := 0; w < 2; w++ {
		type wr struct {
			id  int
			off int64
			n   int
			fua bool
		}
		var ws []wr
		for range 1 + rng.IntN(3) {
			b := rng.Int64N(blocks)
			n := 1 + rng.Int64N(min(blocks-b, int64(c.g.K)))
			ws = append(ws, wr{id, b * layout.BlockSize, int(n) * layout.BlockSize, rng.IntN(6) == 0})
			id++
		}
		c.s.spawn(func() {
			for _, w := range ws {
				c.write(w.id, w.off, w.n, w.fua)
			}
		})
	}
	flushes := 1 + rng.IntN(4)
	c.s.spawn(func() {
		for range flushes {
			c.flush()
		}
	})
	// With a member failed at setup: re-add it, replace it or leave it;
	// otherwise maybe fail one.
	admin := 0
	switch r := rng.IntN(10); {
	case prefailed >= 0 && r < 4:
		admin = 1
	case prefailed >= 0 && r < 7:
		admin = 2
	case prefailed < 0 && r < 5:
		admin = 3
	}
	slot := rng.IntN(c.g.Width())
	replacement := &hookMember{MemMember: NewMemMember(c.size), slot: slot, hook: c.s.hook}
	rebuild := rng.IntN(2) == 0
	c.s.spawn(func() {
		switch {
		case admin == 1 && prefailed >= 0:
			err := c.v.ReAdd(c.hm[prefailed], "returned")
			c.logf("re-add slot %d: %v", prefailed, err)
			c.actorErr("re-add", err)

		case admin == 2 && prefailed >= 0:
			replacement.slot = prefailed
			err := c.v.Replace(prefailed, replacement, "replacement")
			c.logf("replace slot %d: %v", prefailed, err)
			c.actorErr("replace", err)
			c.emu.Lock()
			c.extra = append(c.extra, replacement)
			c.emu.Unlock()
		case admin == 3 && c.canLoseAdmin(slot):
			f := &schedWrite{start: c.model.clock.Add(1)}
			err := c.v.FailMember(slot)
			f.end = c.model.clock.Add(1)
			c.model.mu.Lock()
			c.model.failures = append(c.model.failures, f)
			c.model.mu.Unlock()
			c.logf("fail slot %d: %v", slot, err)
			c.actorErr("fail", err)
			return
		default:
			return
		}
		if rebuild {
			err := c.v.Rebuild(context.Background(), RebuildOptions{CheckpointRows: 1, Workers: 1, YieldDelay: -1})
			c.logf("rebuild: %v", err)
			c.actorErr("rebuild", err)
		}
	})
}

func (c *schedCase) canLoseAdmin(slot int) bool {
	c.emu.Lock()
	defer c.emu.Unlock()
	if c.lost[slot] || len(c.lost) >= c.g.M {
		return false
	}
	c.lost[slot] = true
	return true
}

// check reads every block and compares it with the model.
func (c *schedCase) check(what string, afterCut bool) error {
	got := make([]byte, layout.BlockSize)
	for b := int64(0); b < c.v.Size()/layout.BlockSize; b++ {
		if c.taint[b/int64(c.g.K)] {
			continue
		}
		if _, err := c.v.ReadAt(got, b*layout.BlockSize); err != nil {
			return c.fail("%s: read block %d: %v", what, b, err)
		}
		allowed := c.model.allowed(b, afterCut, c.g.K)
		ok := allowed == nil
		for _, a := range allowed {
			if bytes.Equal(a, got) {
				ok = true
				break
			}
		}
		if !ok {
			return c.fail("%s: block %d reads a value it may not hold (write %d of block %d, first byte 0x%02x)",
				what, b, int(got[0])|int(got[1])<<8, int(got[2])|int(got[3])<<8, got[0])
		}
	}
	return nil
}

// verify runs the checks of the volume as it is now: every block, parity
// of every stripe (when every member is in sync), then every block again
// after losing members up to m.
func (c *schedCase) verify(what string, afterCut bool) error {
	if err := c.check(what, afterCut); err != nil {
		return err
	}
	st := c.v.Status()
	var inSync []int
	for _, m := range st.Members {
		if m.Role == superblock.RoleActive {
			inSync = append(inSync, m.Slot)
		}
	}
	if len(inSync) == c.g.Width() {
		rep, err := c.v.Scrub(context.Background(), false, RebuildOptions{YieldDelay: -1})
		if err != nil {
			return c.fail("%s: scrub: %v", what, err)
		}
		if rep.Mismatches != 0 {
			return c.fail("%s: %d stripes whose parity does not match their data (e.g. %v): a member loss would read garbage",
				what, rep.Mismatches, rep.Examples)
		}
	}
	lose := c.g.M - (c.g.Width() - len(inSync))
	c.rng.Shuffle(len(inSync), func(i, j int) { inSync[i], inSync[j] = inSync[j], inSync[i] })
	for _, slot := range inSync[:max(0, lose)] {
		c.logf("%s: lose slot %d", what, slot)
		c.s.mu.Lock()
		c.s.dead[slot] = true
		c.s.mu.Unlock()
	}
	if lose > 0 {
		return c.check(what+fmt.Sprintf(" after losing %d members", lose), afterCut)
	}
	return nil
}

// bitmapCoversCache checks, at the power cut, the write-intent invariant
// against the worst subset of unflushed writes a crash may keep: every
// region with an unflushed data write on some member must have its bit set
// in both the durable and the cached bitmap of some member (else a crash
// keeping each member's bitmap version without the bit, and dropping part
// of the data writes, leaves a torn stripe that assembly does not resync).
func (c *schedCase) bitmapCoversCache() error {
	bmOff, bmLen := c.v.base.BitmapOffset, int64(c.v.base.BitmapBytes)
	regionRows := c.v.bm.regionRows
	covered := map[int64]bool{}
	dirty := map[int64]int{} // region -> a slot with an unflushed write there
	for _, h := range append(c.hm, c.extra...) {
		h.mu.Lock()
		h.MemMember.mu.Lock()
		durable := decodeBitset(h.MemMember.durable[bmOff:bmOff+bmLen], c.v.bm.n)
		cached := decodeBitset(h.MemMember.visible[bmOff:bmOff+bmLen], c.v.bm.n)
		for r := int64(0); r < c.v.bm.n; r++ {
			if durable.test(r) && cached.test(r) {
				covered[r] = true
			}
		}
		for _, off := range h.pending {
			if off >= c.cfg.DataOffset {
				dirty[(off-c.cfg.DataOffset)/int64(c.cfg.ChunkSize)/regionRows] = h.slot
			}
		}
		h.MemMember.mu.Unlock()
		h.mu.Unlock()
	}
	for r, slot := range dirty {
		if !covered[r] {
			return c.fail("power cut: region %d has unflushed data writes (slot %d) but no member's bitmap holds its bit both durably and in its cache", r, slot)
		}
	}
	return nil
}

// restart is the power cut's aftermath: every member keeps a random subset
// of its unflushed writes and comes back (a member that failed with an I/O
// error too: its drive may reappear after the restart). A member that the
// newest superblock records as failed comes back holding garbage: it was
// failed for a reason, and only an explicit ReAdd or Replace may return
// it. The volume is reassembled and its resync runs to the end.
func (c *schedCase) restart() error {
	c.v.Abandon()
	var newest *superblock.Superblock
	var devs []*hookMember
	for _, h := range append(c.hm, c.extra...) {
		h.crash(func(int64) bool { return c.rng.IntN(2) == 0 })
		sb, err := superblock.ReadCopies(h.MemMember)
		if err != nil {
			continue // a replacement that never got its superblock
		}
		if newest == nil || superblock.Newer(sb, newest) {
			newest = sb
		}
		devs = append(devs, h)
	}
	c.s.mu.Lock()
	c.s.cut = false
	clear(c.s.dead)
	c.s.mu.Unlock()
	var use []Member
	for _, h := range devs {
		sb, _ := superblock.ReadCopies(h.MemMember)
		if m := newest.Members[sb.Slot]; m.Role == superblock.RoleFailed && m.UUID == sb.MemberUUID {
			c.logf("restart: slot %d comes back failed, holding garbage", sb.Slot)
			h.MemMember.Corrupt(c.cfg.DataOffset, bytes.Repeat([]byte{0xde}, int(c.size-c.cfg.DataOffset)))
		}
		use = append(use, h)
	}
	if err := c.reassemble(use); err != nil {
		return err
	}
	v := c.v
	c.model.mu.Lock()
	failures := len(c.model.failures)
	c.model.mu.Unlock()
	if n := v.Status().WriteHoleStripes; n != 0 && (failures == 0 || openWindows) {
		return c.fail("%d write-hole stripes although no member was lost with the power cut", n)
	}
	return nil
}

// reassemble assembles use after the power cut as c.v (a synchronous or a
// background resync) and waits for the resync.
func (c *schedCase) reassemble(use []Member) error {
	opts := Options{Logger: quietLogger(), SyncResync: c.rng.IntN(2) == 0, Resync: RebuildOptions{YieldDelay: -1}}
	v, err := Assemble(use, nil, opts)
	if err != nil {
		return c.fail("reassemble after the power cut: %v", err)
	}
	v.setFaults(c.f)
	c.v = v
	if err := v.WaitResync(context.Background()); err != nil {
		return c.fail("resync after the power cut: %v", err)
	}
	return nil
}

// runSchedule runs one seeded schedule and returns the first violation.
func runSchedule(t *testing.T, seed uint64, f faults) error {
	c := &schedCase{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), f: f,
		lost: map[int]bool{}}
	prefailed := c.setup()
	c.cutAt = -1
	if c.rng.IntN(3) != 0 {
		c.cutAt = 10 + c.rng.IntN(60)
	}
	c.s.rank = c.rng.Perm(4 * c.g.Width())
	c.s.reshuffle = 5 + c.rng.IntN(20)
	c.s.onFail = func() {
		t := c.model.clock.Add(1)
		c.model.mu.Lock()
		c.model.failures = append(c.model.failures, &schedWrite{start: t, end: t})
		c.model.mu.Unlock()
	}
	c.s.onCut = func() { c.cutErr = c.bitmapCoversCache() }
	c.s.mu.Lock()
	c.s.active = true
	c.s.mu.Unlock()
	c.actors(prefailed)
	c.s.run(t, c.rng, c.canLose, c.cutAt)
	defer func() { c.v.Abandon() }()
	if len(c.errs) > 0 {
		return c.fail("unexpected errors without a power cut: %v", c.errs)
	}
	if c.s.cut {
		c.logf("power cut at step %d", c.s.cutStep)
		if c.cutErr != nil {
			return c.cutErr
		}
		if err := c.restart(); err != nil {
			return err
		}
		return c.verify("after the power cut", true)
	}
	return c.verify("live", false)
}

// openWindows makes the checker hold blocks in open windows (see
// schedModel.openWindow) to the model too: FABRAID_SCHED_OPEN=1.
var openWindows = os.Getenv("FABRAID_SCHED_OPEN") != ""

func schedSeedEnv(t *testing.T) (uint64, bool) {
	s := os.Getenv("FABRAID_SCHED_SEED")
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("FABRAID_SCHED_SEED: %v", err)
	}
	return v, true
}

// TestSchedule runs seeded schedules of the checker above: 200 by default
// (a few seconds; 40 with -short or -race), FABRAID_SCHED_SCHEDULES=N for more, FABRAID_SCHED_SEED
// for one.
func TestSchedule(t *testing.T) {
	n, d := schedRuns(t, 200, 40, func(seed uint64) error { return runSchedule(t, seed, faults{}) })
	if n > 0 {
		t.Logf("%d schedules in %v (%.0f/s)", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
	}
}

// schedRuns runs run for the one seed of FABRAID_SCHED_SEED (and returns
// 0), or for n seeds from the test seed on: FABRAID_SCHED_SCHEDULES, else
// def, else short with -short or -race. It fails the test at the first
// violation.
func schedRuns(t *testing.T, def, short int, run func(seed uint64) error) (n int, d time.Duration) {
	if seed, ok := schedSeedEnv(t); ok {
		if err := run(seed); err != nil {
			t.Fatal(err)
		}
		return 0, 0
	}
	n = def
	if testing.Short() || raceEnabled {
		n = short
	}
	if s := os.Getenv("FABRAID_SCHED_SCHEDULES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("FABRAID_SCHED_SCHEDULES: %v", err)
		}
	}
	base := testSeed(t)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if err := run(base + uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	return n, time.Since(t0)
}

// TestScheduleSensitivity re-introduces each fixed bug (faults.go) and
// counts how many schedules the checker needs to catch it:
// FABRAID_SCHED_SENSITIVITY=<schedules per bug> (long; not run by default).
func TestScheduleSensitivity(t *testing.T) {
	s := os.Getenv("FABRAID_SCHED_SENSITIVITY")
	if s == "" {
		t.Skip("set FABRAID_SCHED_SENSITIVITY=<schedules per bug>")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("FABRAID_SCHED_SENSITIVITY: %v", err)
	}
	base := testSeed(t)
	one := func(seed uint64, f faults) error { return runSchedule(t, seed, f) }
	var st takeoverStats
	two := func(seed uint64, f faults) error { return runTakeover(t, seed, f, &st) }
	for _, tc := range []struct {
		name string
		f    faults
		run  func(uint64, faults) error
	}{
		{"none", faults{}, one},
		{"bug1-readd-early-snapshot", faults{readdEarlySnapshot: true}, one},
		{"bug2-end-forgets", faults{endForgets: true}, one},
		{"ack-before-recorded", faults{ackBeforeRecorded: true}, one},
		{"record-before-flush", faults{recordBeforeFlush: true}, one},
		{"takeover-none", faults{}, two},
		{"takeover-bug4-fence-events-only", faults{fenceEventsOnly: true}, two},
	} {
		if only := os.Getenv("FABRAID_SCHED_ONLY"); only != "" && !strings.Contains(tc.name, only) {
			continue
		}
		caught, first := 0, -1
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := tc.run(base+uint64(i), tc.f); err != nil {
				caught++
				if first < 0 {
					first = i + 1
					t.Logf("%s: first caught: %v", tc.name, strings.SplitN(err.Error(), "\n", 2)[0])
				}
			}
		}
		t.Logf("%s: caught by %d of %d schedules (first after %d) in %v", tc.name, caught, n, first,
			time.Since(t0).Round(time.Millisecond))
	}
}
