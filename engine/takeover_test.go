package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// Takeover schedules: the schedule checker (schedule_test.go) with a
// second owner. The old owner O runs writers, a flusher and maybe a
// re-add with a rebuild; at a random step the storage fence falls and a
// new engine instance N assembles the same disks at a newer owner epoch,
// as a failover does, while O still runs. Every disk is one MemMember
// reached by two hooked paths, one per owner, whose I/O the one scheduler
// interleaves.
//
// The fence, as the cluster sets it: from the fence point on, O's I/O to
// the disks of other nodes fails with a path error (errPathGone, which the
// member classifies as unreachable) when the scheduler releases it; I/O O
// issued before the fence point lands or fails, and N starts only once
// none of it is pending (an exporter acknowledges the fence after its
// queues drained). O's own disks ("local": 1..m slots, the failure-domain
// rule) stay writable for O until it freezes, at a random later step or
// never (then only its next metadata write can stop it).
//
// Checks:
//   - O writes no superblock after any of its fence-check reads returned a
//     copy with a newer owner epoch (it must stop with ErrFenced at that
//     metadata write);
//   - every write N acknowledged reads back, live or after a power cut
//     during N's run and a reassembly, then after losing up to m members;
//     writes O acknowledged before N began to assemble count as durable
//     once N's assembly (which flushes every member) succeeded; writes O
//     acknowledged later are untrusted: allowed, never required;
//   - a stripe in which a data write of O landed on one of O's own disks
//     after N began to assemble is not checked (counted): that is the
//     split brain the self-fence must prevent, no engine check can;
//   - N's assembly may refuse only because O recorded the fenced disks as
//     failed on its own disks before N read them (counted).

// takeoverStats counts the outcomes of takeover schedules.
type takeoverStats struct {
	refused, tainted, fenced, frozen, cuts, stale, n int
}

// takeoverCase is one seeded takeover schedule.
type takeoverCase struct {
	*schedCase
	local     map[int]bool
	oEpoch    uint64
	vn        *Volume // N, once assembled
	nDevs     []*hookMember
	fenceAt   int // step of the fence point
	nAt       int // earliest step of N's start
	freezeAt  int // step of O's freeze (-1: never)
	fenceArr  int // s.arrived at the fence point: O's I/O before it may land
	fenced    bool
	nStarted  bool
	tA        int64 // model clock when N began to assemble
	assembled atomic.Bool
	frozen    bool
	abandoned bool
	startN    chan struct{}
	freezeO   chan struct{}
	abandonO  chan struct{}
	sawNewer  atomic.Bool // O read a superblock copy with a newer epoch
	violation atomic.Pointer[string]
	refused   bool
	overwrote bool // an old owner's superblock write landed over the new owner's
	stale     bool // ... and was still there at the power cut
}

// onStep runs the takeover's events; the scheduler holds s.mu.
func (c *takeoverCase) onStep(idle bool) bool {
	s := c.s
	switch {
	case !c.fenced && (s.steps >= c.fenceAt || idle):
		c.fenced = true
		c.fenceArr = s.arrived
		c.logf("step %d: storage fence (O's local slots %v)", s.steps, keys(c.local))
		return true
	case c.fenced && !c.nStarted && (s.steps >= c.nAt || idle) && !c.oldFencedPending():
		c.nStarted = true
		c.tA = c.model.clock.Add(1)
		c.logf("step %d: new owner assembles at epoch %d", s.steps, c.oEpoch+1)
		close(c.startN)
		return true
	case c.fenced && !c.frozen && (c.freezeAt >= 0 && s.steps >= c.freezeAt || idle && c.nStarted):
		c.frozen = true
		c.logf("step %d: old owner freezes", s.steps)
		close(c.freezeO)
		return true
	case idle && c.frozen && !c.abandoned:
		c.abandoned = true
		close(c.abandonO)
		return true
	}
	return false
}

// oldFencedPending reports whether I/O O issued to a fenced disk before
// the fence point is still pending.
func (c *takeoverCase) oldFencedPending() bool {
	for _, p := range c.s.pending {
		if p.op.owner == 0 && !c.local[p.op.slot] && p.arrive < c.fenceArr {
			return true
		}
	}
	return false
}

// onRelease fails O's fenced I/O, records what O's fence checks read and
// taints stripes O writes on its own disks once N has begun.
func (c *takeoverCase) onRelease(p *schedOp) error {
	op := p.op
	if op.owner != 0 || !c.fenced {
		return nil
	}
	if !c.local[op.slot] {
		if p.arrive >= c.fenceArr || c.rng.IntN(2) == 0 {
			return errPathGone
		}
		return nil
	}
	switch {
	case !op.write && !op.flush && (op.off == superblock.CopyAOffset || op.off == superblock.CopyBOffset):
		h := c.hm[op.slot].MemMember
		h.mu.Lock()
		sb, err := superblock.Unmarshal(h.visible[op.off : op.off+superblock.CopySize])
		h.mu.Unlock()
		if err == nil && sb.Epoch > c.oEpoch {
			c.sawNewer.Store(true)
		}
	case op.write && (op.off == superblock.CopyAOffset || op.off == superblock.CopyBOffset):
		if sb, err := superblock.ReadCopies(c.hm[op.slot].MemMember); err == nil && sb.Epoch > c.oEpoch && !c.overwrote {
			// Its fence check came before the new owner's superblock
			// write (the check and the write are not atomic).
			c.overwrote = true
			c.logf("old owner's superblock write overwrites the new owner's on its own slot %d", op.slot)
		}
	case op.write && c.nStarted && op.off >= c.cfg.DataOffset:
		for off := op.off; off < op.off+int64(op.n); off += int64(c.cfg.ChunkSize) {
			row := (off - c.cfg.DataOffset) / int64(c.cfg.ChunkSize)
			if row < c.g.Rows && !c.taint[row] {
				c.taint[row] = true
				c.logf("old owner's data write lands on its own slot %d after the takeover: stripe %d not checked", op.slot, row)
			}
		}
	}
	return nil
}

// oHook is the scheduler's hook for O's paths plus the metadata check.
func (c *takeoverCase) oHook(op memOp) error {
	if !op.after && op.write && (op.off == superblock.CopyAOffset || op.off == superblock.CopyBOffset) && c.sawNewer.Load() {
		msg := fmt.Sprintf("old owner writes its superblock (%s) after its fence check read a newer owner epoch: it was not fenced", op)
		c.violation.CompareAndSwap(nil, &msg)
	}
	return c.s.hook(op)
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// newOwner assembles N (when the scheduler says so) and runs its actors.
func (c *takeoverCase) newOwner(writes [][]wrSpec, flushes int, syncResync bool) {
	<-c.startN
	var devs []Member
	for _, h := range c.nDevs {
		devs = append(devs, h)
	}
	opts := Options{Logger: quietLogger(), Epoch: c.oEpoch + 1, SyncResync: syncResync, Resync: RebuildOptions{YieldDelay: -1}}
	v, err := Assemble(devs, nil, opts)
	c.logf("new owner: assemble: %v", err)
	if err != nil {
		c.s.mu.Lock()
		cut := c.s.cut
		c.s.mu.Unlock()
		switch {
		case cut:
		case errors.Is(err, ErrAssembly) && strings.Contains(err.Error(), "current members"):
			c.refused = true
		default:
			c.emu.Lock()
			c.errs = append(c.errs, fmt.Errorf("new owner's assembly: %w", err))
			c.emu.Unlock()
		}
		return
	}
	v.setFaults(c.f)
	var roles []string
	for _, m := range v.Status().Members {
		roles = append(roles, fmt.Sprintf("%d:%s/%s", m.Slot, m.Role, m.Failure))
	}
	c.logf("new owner: members %s", strings.Join(roles, " "))
	end := c.model.clock.Add(1)
	c.model.mu.Lock()
	// Assembly flushed every member: what O completed before is durable.
	c.model.flushes = append(c.model.flushes, &schedWrite{start: c.tA, end: end, owner: 1})
	c.model.mu.Unlock()
	c.vn = v
	c.assembled.Store(true)
	for _, ws := range writes {
		c.s.spawn(func() {
			for _, w := range ws {
				c.writeTo(v, 1, w.id, w.off, w.n, w.fua)
			}
		})
	}
	c.s.spawn(func() {
		for range flushes {
			c.flushOn(v, 1)
		}
	})
}

type wrSpec struct {
	id  int
	off int64
	n   int
	fua bool
}

func (c *takeoverCase) writeSpecs(first int) [][]wrSpec {
	blocks := c.v.Size() / layout.BlockSize
	id := first
	var out [][]wrSpec
	for range 2 {
		var ws []wrSpec
		for range 1 + c.rng.IntN(3) {
			b := c.rng.Int64N(blocks)
			n := 1 + c.rng.Int64N(min(blocks-b, int64(c.g.K)))
			ws = append(ws, wrSpec{id, b * layout.BlockSize, int(n) * layout.BlockSize, c.rng.IntN(6) == 0})
			id++
		}
		out = append(out, ws)
	}
	return out
}

// restartAfterCut crashes every disk (each keeps a random subset of its
// unflushed writes), corrupts those the newest superblock records as
// failed (only re-add or replace may return them) and reassembles.
func (c *takeoverCase) restartAfterCut() error {
	c.v.Abandon()
	c.vn.Abandon()
	var newest *superblock.Superblock
	for _, h := range c.nDevs {
		h.MemMember.Crash(func() bool { return c.rng.IntN(2) == 0 })
		h.MemMember.Reopen()
		if sb, err := superblock.ReadCopies(h.MemMember); err == nil && (newest == nil || superblock.Newer(sb, newest)) {
			newest = sb
		}
	}
	c.s.mu.Lock()
	c.s.cut = false
	clear(c.s.dead)
	c.s.mu.Unlock()
	var use []Member
	for _, h := range c.nDevs {
		sb, err := superblock.ReadCopies(h.MemMember)
		if err != nil {
			return c.fail("after the cut: slot %d has no superblock: %v", h.slot, err)
		}
		if c.overwrote && sb.Epoch < newest.Epoch && newest.Members[sb.Slot].Role != superblock.RoleFailed {
			// The old owner's superblock write landed over the new
			// owner's on its own disk (its fence check came just
			// before the new owner's write) and the new owner wrote
			// no metadata since: an assembly takes that disk for a
			// stale one, which may refuse the start or count write
			// holes. Not checked further (counted).
			c.logf("restart: slot %d still holds the old owner's superblock", sb.Slot)
			c.stale = true
			return nil
		}
		if m := newest.Members[sb.Slot]; m.Role == superblock.RoleFailed && m.UUID == sb.MemberUUID && !m.Failure.Returns() {
			c.logf("restart: slot %d comes back failed, holding garbage", sb.Slot)
			h.MemMember.Corrupt(c.cfg.DataOffset, bytes.Repeat([]byte{0xde}, int(c.size-c.cfg.DataOffset)))
		}
		use = append(use, h)
	}
	if err := c.reassemble(use); err != nil {
		return err
	}
	if n := c.v.Status().WriteHoleStripes; n != 0 && len(c.taint) == 0 {
		return c.fail("%d write-hole stripes although no member was lost with the power cut", n)
	}
	return nil
}

// runTakeover runs one seeded takeover schedule and returns the first
// violation.
func runTakeover(t *testing.T, seed uint64, f faults, st *takeoverStats) error {
	c := &takeoverCase{schedCase: &schedCase{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x7a4e)), f: f,
		lost: map[int]bool{}, taint: map[int64]bool{}}, local: map[int]bool{},
		startN: make(chan struct{}), freezeO: make(chan struct{}), abandonO: make(chan struct{})}
	prefailed := c.setup()
	rng := c.rng
	w := c.g.Width()
	// Fewer than k own disks: with k of them an old owner that does not
	// freeze serves on alone (docs/engine.md, "Two owners").
	for _, slot := range rng.Perm(w)[:1+rng.IntN(min(c.g.M, c.g.K-1))] {
		c.local[slot] = true
	}
	c.oEpoch = c.v.Status().Epoch
	// O's paths check the metadata writes; N's are second paths to the
	// same disks.
	for _, h := range c.hm {
		h.hook = c.oHook
		h.paths = true
		c.nDevs = append(c.nDevs, &hookMember{MemMember: h.MemMember, slot: h.slot, owner: 1, paths: true, hook: c.s.hook})
	}
	c.fenceAt = 3 + rng.IntN(40)
	c.nAt = c.fenceAt + rng.IntN(10)
	c.freezeAt = -1
	if rng.IntN(3) != 0 {
		c.freezeAt = c.fenceAt + rng.IntN(60)
	}
	c.cutAt = -1
	if rng.IntN(3) != 0 {
		c.cutAt = c.nAt + rng.IntN(60)
	}
	s := c.s
	s.width = w
	s.rank = rng.Perm(8 * w)
	s.reshuffle = 5 + rng.IntN(20)
	s.onStep = c.onStep
	s.onRelease = c.onRelease
	s.cutArmed = c.assembled.Load
	c.ownerErrOK = func() bool {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		return c.fenced
	}
	oWrites := c.writeSpecs(1)
	nWrites := c.writeSpecs(100)
	oFlushes, nFlushes := 1+rng.IntN(3), 1+rng.IntN(3)
	readd := prefailed >= 0 && rng.IntN(2) == 0
	syncResync := rng.IntN(2) == 0
	s.mu.Lock()
	s.active = true
	s.mu.Unlock()
	o := c.v
	for _, ws := range oWrites {
		s.spawn(func() {
			for _, w := range ws {
				c.writeTo(o, 0, w.id, w.off, w.n, w.fua)
			}
		})
	}
	s.spawn(func() {
		for range oFlushes {
			c.flushOn(o, 0)
		}
	})
	if readd {
		s.spawn(func() {
			err := o.ReAdd(c.hm[prefailed], "returned")
			c.logf("owner 0: re-add slot %d: %v", prefailed, err)
			if err == nil {
				err = o.Rebuild(context.Background(), RebuildOptions{CheckpointRows: 1, Workers: 1, YieldDelay: -1})
				c.logf("owner 0: rebuild: %v", err)
			}
			c.ownerErr(0, "re-add", err)
		})
	}
	s.spawn(func() {
		<-c.freezeO
		o.Freeze()
		<-c.abandonO
		o.Abandon()
	})
	s.spawn(func() { c.newOwner(nWrites, nFlushes, syncResync) })
	s.run(t, rng, func(int) bool { return false }, c.cutAt)
	defer func() {
		o.Abandon()
		if c.vn != nil {
			c.vn.Abandon()
		}
	}()
	st.n++
	if o.stopErr() != nil && errors.Is(o.stopErr(), ErrFenced) {
		st.fenced++
	}
	if c.frozen {
		st.frozen++
	}
	if len(c.taint) > 0 {
		st.tainted++
	}
	if msg := c.violation.Load(); msg != nil {
		return c.fail("%s", *msg)
	}
	if len(c.errs) > 0 {
		return c.fail("unexpected errors without a power cut: %v", c.errs)
	}
	if c.refused {
		st.refused++
		return nil
	}
	if c.vn == nil {
		return nil // the cut fell during N's assembly
	}
	// O's acknowledgements after N began are untrusted, and so are its
	// flushes then (they reached only O's own disks).
	c.model.mu.Lock()
	for _, w := range c.model.writes {
		if w.owner == 0 && w.end > c.tA {
			w.untrusted = true
		}
	}
	var fl []*schedWrite
	for _, f := range c.model.flushes {
		if f.owner == 1 || f.end < c.tA {
			fl = append(fl, f)
		}
	}
	c.model.flushes = fl
	c.model.mu.Unlock()
	if s.cut {
		st.cuts++
		c.logf("power cut at step %d", s.cutStep)
		if err := c.restartAfterCut(); err != nil || c.stale {
			if c.stale {
				st.stale++
			}
			return err
		}
		return c.verify("after the power cut", true)
	}
	if err := c.vn.WaitResync(context.Background()); err != nil {
		return c.fail("new owner's resync: %v", err)
	}
	c.v = c.vn
	return c.verify("new owner, live", false)
}

// TestScheduleTakeover runs seeded takeover schedules: 50 by default (15
// with -short or -race), FABRAID_SCHED_SCHEDULES=N for more,
// FABRAID_SCHED_SEED for one.
func TestScheduleTakeover(t *testing.T) {
	var st takeoverStats
	n, d := schedRuns(t, 50, 15, func(seed uint64) error { return runTakeover(t, seed, faults{}, &st) })
	if n == 0 {
		return
	}
	t.Logf("%d takeover schedules in %v (%.0f/s): old owner fenced in %d, frozen in %d; new owner refused in %d; "+
		"%d with the old owner's data landing on its own disks after the takeover (stripes not checked); %d power cuts, "+
		"%d of them with the old owner's superblock on its own disk (not checked)",
		n, d.Round(time.Millisecond), float64(n)/d.Seconds(), st.fenced, st.frozen, st.refused, st.tainted, st.cuts, st.stale)
}

// A metadata write that retries after a member's superblock write failed
// checks the fence again first: a new owner may have written its
// superblocks meanwhile (the failing member was cut off by the storage
// fence of that takeover), and the retry must not overwrite them on the
// members the old owner still reaches.
func TestMetadataRetryChecksFence(t *testing.T) {
	var armed atomic.Bool
	var hm []*hookMember
	var newer []byte
	hook := func(op memOp) error {
		if op.after || !armed.Load() || op.slot != 2 || !op.write || op.off != superblock.CopyAOffset {
			return nil
		}
		armed.Store(false)
		// The takeover: the new owner's superblocks reach slots 0 and 1,
		// slot 2's path is fenced.
		for _, h := range hm[:2] {
			for _, off := range []int64{superblock.CopyAOffset, superblock.CopyBOffset} {
				if _, err := h.MemMember.WriteAt(newer, off); err != nil {
					t.Error(err)
				}
			}
		}
		return errPathGone
	}
	var devs []Member
	hm, devs = hookMembers(3, integritySize, hook)
	v, err := Create(integrityCfg(), devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Abandon()
	sb := v.meta.Clone()
	sb.Epoch++
	sb.Events++
	if newer, err = sb.Marshal(); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	v.metaMu.Lock()
	err = v.writeMetaLocked()
	v.unlockMeta()
	if !errors.Is(err, ErrFenced) {
		t.Errorf("metadata write after the takeover: %v, want %v", err, ErrFenced)
	}
	for _, h := range hm[:2] {
		got, err := superblock.ReadCopies(h.MemMember)
		if err != nil || got.Epoch != sb.Epoch {
			t.Fatalf("slot %d after the old owner's metadata write: epoch %d (%v), want the new owner's %d", h.slot, got.Epoch, err, sb.Epoch)
		}
	}
}
