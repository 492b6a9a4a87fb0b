package engine

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// power is a shared power supply: after a number of member writes it is
// cut, and from then on no member persists anything (writes and flushes
// report success and do nothing, as a dying machine's I/O never returns an
// error to anyone who could act on it).
type power struct {
	mu   sync.Mutex
	left int64 // member writes until the cut; negative: never
	cut  bool
}

func (p *power) tick() (cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return true
	}
	if p.left == 0 {
		p.cut = true
		return true
	}
	if p.left > 0 {
		p.left--
	}
	return false
}

func (p *power) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

func (p *power) arm(writes int64) {
	p.mu.Lock()
	p.left, p.cut = writes, false
	p.mu.Unlock()
}

// cutMember is a MemMember on a power supply.
type cutMember struct {
	*MemMember
	p *power
}

func (c *cutMember) WriteAt(b []byte, off int64) (int, error) {
	if c.p.tick() {
		return len(b), nil
	}
	return c.MemMember.WriteAt(b, off)
}

func (c *cutMember) WriteAtFUA(b []byte, off int64) (int, error) {
	if c.p.tick() {
		return len(b), nil
	}
	return c.MemMember.WriteAtFUA(b, off)
}

func (c *cutMember) Flush() error {
	if c.p.isCut() {
		return nil
	}
	return c.MemMember.Flush()
}

// crashOracle knows, per block, the value durable at the last flush and
// every value written since.
type crashOracle struct {
	mu      sync.Mutex
	durable []byte
	pending map[int64][][]byte
}

func (o *crashOracle) writing(off int64, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := 0; i < len(p); i += layout.BlockSize {
		b := (off + int64(i)) / layout.BlockSize
		o.pending[b] = append(o.pending[b], p[i:i+layout.BlockSize])
	}
}

// flushed makes every value last written durable; writes must be
// quiescent.
func (o *crashOracle) flushed(last map[int64][]byte) {
	for b, v := range last {
		copy(o.durable[b*layout.BlockSize:], v)
	}
	o.pending = map[int64][][]byte{}
}

// check returns how many blocks of got hold a value that is neither
// their durable value nor one written since, and the first of them.
func (o *crashOracle) check(got []byte) (bad int, first int64) {
	first = -1
	for b := int64(0); b < int64(len(got))/layout.BlockSize; b++ {
		blk := got[b*layout.BlockSize : (b+1)*layout.BlockSize]
		if bytes.Equal(blk, o.durable[b*layout.BlockSize:(b+1)*layout.BlockSize]) {
			continue
		}
		ok := false
		for _, c := range o.pending[b] {
			if bytes.Equal(blk, c) {
				ok = true
				break
			}
		}
		if !ok {
			bad++
			if first < 0 {
				first = b
			}
		}
	}
	return bad, first
}

// crashCase selects what crashRun does.
type crashCase struct {
	// journalOff runs without the stripe journal.
	journalOff bool
	// owner: in every group 1..m members are in the owner's failure
	// domain, and they are lost at the cut (the owner died with its
	// drives); up to m minus those other members are lost, replaced or
	// returned before.
	owner bool
	// ownerJournal turns owner-domain journaling on (Options.OwnerDomain).
	ownerJournal bool
	// direct: writers plan their writes (PlanWrite, rounds run one IO
	// after another) and fall back to WriteAt when not planned; planned
	// counts the planned ones.
	direct  bool
	planned *atomic.Int64
	// fixedParity: the owner-parity layout, the owner's members among
	// each group's last m (its parity members).
	fixedParity bool
	// noDegrade (owner case): no member but the owner's is lost.
	noDegrade bool
}

// ownerDomain is the failure domain of the owner in crashRun.
const ownerDomain = "owner"

// degradedCrash runs one power cut in the middle of writes to a degraded
// volume and returns the number of blocks that read back wrong after
// reassembly (see TestJournalCrash), with a description.
func degradedCrash(t *testing.T, rng *rand.Rand, journalOff bool) (int, string) {
	return crashRun(t, rng, crashCase{journalOff: journalOff})
}

// crashRun is degradedCrash, or with c.owner the owner-domain case (see
// TestJournalCrashOwnerDomain).
func crashRun(t *testing.T, rng *rand.Rand, c crashCase) (int, string) {
	t.Helper()
	journalOff := c.journalOff
	k, m := 2+rng.IntN(4), 1+rng.IntN(3)
	cfg := Config{Name: "cut", K: k, M: m, Groups: 1 + rng.IntN(2), ChunkSize: 4096 << rng.IntN(2),
		RegionSize: 32 << 10, DataOffset: 256 << 10, AssumeZeroed: true, FixedParity: c.fixedParity}
	g := layout.Geometry{K: k, M: m, Groups: cfg.Groups, FixedParity: c.fixedParity}
	size := int64(256<<10) + int64(cfg.ChunkSize)*int64(8+rng.IntN(16))
	// In the owner case, inOwner[slot]: the member is in the owner's
	// domain; every other member has a domain of its own.
	inOwner := map[int]bool{}
	ownerCount := make([]int, g.Groups)
	if c.owner {
		cfg.Domains = make([]string, g.Members())
		for slot := range cfg.Domains {
			cfg.Domains[slot] = fmt.Sprintf("node%d", slot)
		}
		for grp := 0; grp < g.Groups; grp++ {
			ownerCount[grp] = 1 + rng.IntN(m)
			pick := rng.Perm(g.Width())
			if c.fixedParity {
				pick = rng.Perm(m)
				for i := range pick {
					pick[i] += k
				}
			}
			for _, mem := range pick[:ownerCount[grp]] {
				inOwner[g.Slot(grp, mem)] = true
				cfg.Domains[g.Slot(grp, mem)] = ownerDomain
			}
		}
	}
	pw := &power{left: -1}
	mems := make([]*MemMember, g.Members())
	devs := make([]Member, g.Members())
	for i := range devs {
		mems[i] = NewMemMember(size)
		devs[i] = &cutMember{mems[i], pw}
	}
	opts, hooks := Options{Logger: quietLogger()}, testHooks{journalOff: journalOff}
	if rng.IntN(2) == 0 {
		opts.Executor = ParallelExecutor{}
	}
	if c.ownerJournal {
		opts.OwnerDomain = ownerDomain
	}
	v, err := create(cfg, devs, nil, opts, hooks)
	if err != nil {
		t.Fatal(err)
	}
	o := &crashOracle{durable: make([]byte, v.Size()), pending: map[int64][][]byte{}}
	fill := make([]byte, v.Size())
	for i := 0; i < len(fill); i += 8 {
		x := rng.Uint64()
		for j := 0; j < 8; j++ {
			fill[i+j] = byte(x >> (8 * j))
		}
	}
	if _, err := v.WriteAt(fill, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	copy(o.durable, fill)

	// Degrade: in every group lose 1..m members, some of them replaced
	// by an empty member that is not rebuilt yet. In the owner case lose
	// up to m minus the owner's members, none of the owner's.
	lost := map[int]bool{}
	replaced := false
	desc := fmt.Sprintf("%d+%dx%d chunk %d:", k, m, cfg.Groups, cfg.ChunkSize)
	for grp := 0; grp < g.Groups; grp++ {
		var cands []int
		for _, mem := range rng.Perm(g.Width()) {
			if !inOwner[g.Slot(grp, mem)] {
				cands = append(cands, mem)
			}
		}
		n := 1 + rng.IntN(m)
		if c.owner {
			desc += fmt.Sprintf(" group %d: %d owner members", grp, ownerCount[grp])
			n = rng.IntN(m - ownerCount[grp] + 1)
			if c.noDegrade {
				n = 0
			}
		}
		for _, mem := range cands[:n] {
			slot := g.Slot(grp, mem)
			mems[slot].SetFailed(true)
			if err := v.FailMember(slot); err != nil {
				t.Fatal(err)
			}
			switch rng.IntN(4) {
			case 0: // the member returns (its node rebooted): resync target
				mems[slot].Crash(func() bool { return rng.IntN(2) == 0 })
				mems[slot].Reopen()
				mems[slot].SetFailed(false)
				if err := v.ReAdd(&cutMember{mems[slot], pw}, "returned"); err != nil {
					t.Fatal(err)
				}
				replaced = true
				desc += fmt.Sprintf(" slot %d re-added", slot)
			case 1:
				nm := NewMemMember(size)
				if err := v.Replace(slot, &cutMember{nm, pw}, "replacement"); err != nil {
					t.Fatal(err)
				}
				mems[slot] = nm
				replaced = true
				desc += fmt.Sprintf(" slot %d replaced", slot)
			default:
				lost[slot] = true
				desc += fmt.Sprintf(" slot %d lost", slot)
			}
		}
	}
	if rng.IntN(2) == 0 {
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	// Concurrent partial and full-stripe writes in rounds, flushes
	// between some rounds, until the power is cut.
	pw.arm(int64(rng.IntN(400)))
	// Sometimes the replacements are being rebuilt meanwhile, with
	// checkpoints persisted every two rows (metadata writes the cut can
	// land in, rows readable before their checkpoint is durable).
	var rebuildDone chan error
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if replaced && rng.IntN(2) == 0 {
		desc += " rebuilding"
		rebuildDone = make(chan error, 1)
		go func() {
			rebuildDone <- v.Rebuild(ctx, RebuildOptions{CheckpointRows: 2, YieldDelay: -1, Workers: 1})
		}()
	}
	sb := v.Geometry().StripeBytes()
	blocks := v.Size() / layout.BlockSize
	// Workers own slices of the volume whose edges are not stripe
	// aligned: they share stripes but never blocks.
	const workers = 3
	per := blocks / workers
	var lastMu sync.Mutex
	last := map[int64][]byte{}
	for round := 0; round < 20 && !pw.isCut(); round++ {
		var wg sync.WaitGroup
		seeds := []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
		for w := range seeds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seeds[w], uint64(w)))
				lo, hi := int64(w)*per, int64(w+1)*per
				if w == workers-1 {
					hi = blocks
				}
				for i := 0; i < 8; i++ {
					b := lo + r.Int64N(hi-lo)
					off := b * layout.BlockSize
					n := (1 + r.Int64N(min(hi-b, 2*sb/layout.BlockSize))) * layout.BlockSize
					if a := off / sb * sb; r.IntN(4) == 0 && a >= lo*layout.BlockSize && a+sb <= hi*layout.BlockSize {
						off, n = a, sb
					}
					p := make([]byte, n)
					for j := range p {
						p[j] = byte(r.Uint32())
					}
					o.writing(off, p)
					planned := false
					var err error
					if c.direct {
						planned, _, err = directWriter{t: t}.write(v, p, off)
						if planned {
							c.planned.Add(1)
						}
					}
					if !planned && err == nil {
						_, err = v.WriteAt(p, off)
					}
					if err != nil {
						t.Errorf("write: %v", err)
						return
					}
					lastMu.Lock()
					for j := int64(0); j < n; j += layout.BlockSize {
						last[(off+j)/layout.BlockSize] = p[j : j+layout.BlockSize]
					}
					lastMu.Unlock()
				}
			}()
		}
		wg.Wait()
		if rng.IntN(3) == 0 {
			err := v.Flush()
			if err != nil {
				t.Fatal(err)
			}
			if !pw.isCut() {
				o.flushed(last)
				last = map[int64][]byte{}
			}
		}
	}

	if rebuildDone != nil {
		cancel()
		<-rebuildDone
	}
	if pw.isCut() {
		desc += " power cut during the writes;"
	}
	// The crash: unflushed member writes survive at random; in the owner
	// case the owner's members are gone with it.
	v.Abandon()
	var use []Member
	for slot, mem := range mems {
		mem.Crash(func() bool { return rng.IntN(2) == 0 })
		mem.Reopen()
		if inOwner[slot] {
			lost[slot] = true
		}
		if !lost[slot] {
			use = append(use, mem)
		}
	}
	rng.Shuffle(len(use), func(i, j int) { use[i], use[j] = use[j], use[i] })
	ropts := Options{Logger: quietLogger()}
	if c.owner && rng.IntN(2) == 0 {
		// The new owner is another node holding members of the volume:
		// it journals its own domain from now on (recorded only once
		// the resync has finished).
		for ropts.OwnerDomain == "" || ropts.OwnerDomain == ownerDomain {
			ropts.OwnerDomain = cfg.Domains[rng.IntN(g.Members())]
		}
		desc += " new owner " + ropts.OwnerDomain
	}
	v, err = assemble(use, nil, ropts, hooks)
	if err != nil {
		t.Fatalf("%s: reassemble: %v", desc, err)
	}
	defer v.Close()
	// Read while the background resync runs (the volume serves at
	// once), then let it finish before counting write holes.
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatalf("%s: read after crash: %v", desc, err)
	}
	if err := v.WaitResync(context.Background()); err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	v.metaMu.Lock()
	for slot := range v.slots {
		if v.meta.Members[slot].OwnerJournal != v.slots[slot].owner {
			t.Errorf("%s: slot %d: owner-journal flag %v after the resync, owner's member %v",
				desc, slot, v.meta.Members[slot].OwnerJournal, v.slots[slot].owner)
		}
	}
	v.metaMu.Unlock()
	st := v.Status()
	desc += fmt.Sprintf(" journal records replayed %d, write-hole stripes %d", st.JournalReplayed, st.WriteHoleStripes)
	if !journalOff && (!c.owner || c.ownerJournal) && st.WriteHoleStripes != 0 {
		t.Errorf("%s: write-hole stripes reported with a journal", desc)
	}
	for slot, ms := range st.Members {
		if ms.Role == superblock.RoleActive && lost[slot] {
			t.Fatalf("lost slot %d active", slot)
		}
	}
	bad, first := o.check(got)
	if bad > 0 {
		desc += fmt.Sprintf(" first bad block %d", first)
	}
	return bad, desc
}

// TestJournalCrash cuts the power in the middle of concurrent partial- and
// full-stripe writes to degraded volumes (up to m members per group lost,
// replaced or returned and not yet rebuilt, sometimes being rebuilt
// meanwhile; the cut lands anywhere: in journal records, bitmap blocks,
// superblocks, data or parity), drops a random subset of the unflushed member
// writes, reassembles without the lost members and reads everything back.
// Every 4 KiB block must hold its value at the last flush or a value
// written since — including the blocks of the lost members, which are
// reconstructed, and blocks no write touched since the last flush.
func TestJournalCrash(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	iters := 40
	if *longRun {
		iters = 400
	}
	if testing.Short() {
		iters = 10
	}
	cuts := 0
	defer func() { t.Logf("%d of %d runs had the power cut in the middle of the writes", cuts, iters) }()
	for i := 0; i < iters; i++ {
		bad, desc := degradedCrash(t, rng, false)
		if bad > 0 {
			t.Fatalf("iteration %d: %s: %d blocks read back neither their flushed value nor a value written since", i, desc, bad)
		}
		if i < 3 {
			t.Logf("iteration %d: %s", i, desc)
		}
		if strings.Contains(desc, "power cut") {
			cuts++
		}
	}
}

// TestJournalCrashWithoutJournal shows that TestJournalCrash catches the
// write hole: with the journal switched off the same runs lose data that
// was flushed (or never written) in some of them.
func TestJournalCrashWithoutJournal(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	failedRuns, badBlocks := 0, 0
	iters := 40
	for i := 0; i < iters; i++ {
		bad, desc := degradedCrash(t, rng, true)
		if bad > 0 {
			failedRuns++
			badBlocks += bad
			if failedRuns == 1 {
				t.Logf("first torn run: iteration %d: %s: %d bad blocks", i, desc, bad)
			}
		}
	}
	t.Logf("without the journal: %d of %d runs read back wrong data (%d blocks)", failedRuns, iters, badBlocks)
	if failedRuns == 0 {
		t.Fatal("no run lost data without the journal: the crash test does not reach the write hole")
	}
}

// Records left on a member that misses an assembly (it was lost with the
// crash and returns later) must be retired by that assembly although it
// never saw them: their sequence numbers are below the new retired number.
func TestJournalSeqGapCoversAbsentMember(t *testing.T) {
	cfg := Config{Name: "gap", K: 2, M: 2, ChunkSize: 4096, RegionSize: 32 << 10, DataOffset: 256 << 10, AssumeZeroed: true}
	mm, devs := memMembers(4, 1<<20)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mm[0].SetFailed(true)
	if err := v.FailMember(0); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 40; i++ {
		p := make([]byte, layout.BlockSize)
		p[0] = byte(i + 1)
		if _, err := v.WriteAt(p, rng.Int64N(v.Size()/layout.BlockSize)*layout.BlockSize); err != nil {
			t.Fatal(err)
		}
	}
	if v.Status().JournalRecords == 0 {
		t.Fatal("no journal records written")
	}
	// The member with the highest record goes missing.
	absent, top := -1, uint64(0)
	for slot := 1; slot < 4; slot++ {
		js, err := scanJournal([]Member{mm[slot]}, v.base)
		if err != nil {
			t.Fatal(err)
		}
		if js.maxSeq > top {
			absent, top = slot, js.maxSeq
		}
	}
	v.Abandon()
	var use []Member
	for slot, m := range mm {
		m.Crash(func() bool { return true })
		m.Reopen()
		if slot != 0 && slot != absent {
			use = append(use, m)
		}
	}
	v, err = Assemble(use, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.jrn.retired < top || v.jrn.next <= top {
		t.Fatalf("absent member %d holds record %d; assembly retired %d, continues at %d", absent, top, v.jrn.retired, v.jrn.next)
	}
}

// rewriteSuperblocks reopens every member of a closed volume and rewrites
// both superblock copies with change applied (as an older build would have
// written them).
func rewriteSuperblocks(t *testing.T, mm []*MemMember, change func(*superblock.Superblock)) {
	t.Helper()
	for _, m := range mm {
		m.Reopen()
		sb, err := superblock.ReadCopies(m)
		if err != nil {
			t.Fatal(err)
		}
		change(sb)
		b, err := sb.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		m.Corrupt(superblock.CopyAOffset, b)
		m.Corrupt(superblock.CopyBOffset, b)
	}
}

// crashAll crashes every member keeping all unflushed writes (nothing is
// lost but what the caller tears), reopens them and returns those whose
// slot is not in gone.
func crashAll(mm []*MemMember, gone []int) []Member {
	var use []Member
	for slot, m := range mm {
		m.Crash(func() bool { return true })
		m.Reopen()
		if !slices.Contains(gone, slot) {
			use = append(use, m)
		}
	}
	return use
}

// A version 1 volume (made before the journal existed) still assembles,
// runs without a journal, stays version 1 on disk, and reports a crash
// while degraded as write-hole stripes as before.
func TestVersion1VolumeRunsWithoutJournal(t *testing.T) {
	cfg := Config{Name: "old", K: 2, M: 1, ChunkSize: 4096, RegionSize: 32 << 10, DataOffset: 256 << 10, AssumeZeroed: true}
	mm, devs := memMembers(3, 1<<20)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteSuperblocks(t, mm, func(sb *superblock.Superblock) {
		sb.Version, sb.JournalOffset, sb.JournalBytes = superblock.VersionNoJournal, 0, 0
	})
	v, err = Assemble([]Member{mm[0], mm[1], mm[2]}, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); st.Journal {
		t.Fatal("version 1 volume runs with a journal")
	}
	mm[2].SetFailed(true)
	p := bytes.Repeat([]byte{7}, 16<<10)
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if v.Status().JournalRecords != 0 {
		t.Fatal("journal records on a version 1 volume")
	}
	v.Abandon()
	for _, m := range mm[:2] {
		m.Crash(func() bool { return true })
		m.Reopen()
		sb, err := superblock.ReadCopies(m)
		if err != nil || sb.Version != superblock.VersionNoJournal {
			t.Fatalf("superblock after writes: version %v, %v", sb, err)
		}
	}
	v, err = Assemble([]Member{mm[0], mm[1]}, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.WaitResync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v.Status().WriteHoleStripes == 0 {
		t.Fatal("crash while degraded without a journal not reported")
	}
}

// degradedJournalVolume creates a 3+2 volume whose slot holding data
// position 0 of stripe 0 (data0) has failed, so that a write to block 0 is
// journaled; the record goes to data position 1 and lacks data position 2
// (slot data2).
func degradedJournalVolume(t *testing.T, opts Options, hs ...testHooks) (v *Volume, mm []*MemMember, data0, data2 int) {
	t.Helper()
	cfg := Config{Name: "late", K: 3, M: 2, ChunkSize: 4096, RegionSize: 32 << 10, DataOffset: 256 << 10, AssumeZeroed: true}
	g := layout.Geometry{K: 3, M: 2, Groups: 1}
	data0, data2 = g.Slot(0, g.MemberOf(0, 0)), g.Slot(0, g.MemberOf(0, 2))
	mm, devs := memMembers(5, 1<<20)
	var h testHooks
	if len(hs) > 0 {
		h = hs[0]
	}
	v, err := create(cfg, devs, nil, opts, h)
	if err != nil {
		t.Fatal(err)
	}
	mm[data0].SetFailed(true)
	if err := v.FailMember(data0); err != nil {
		t.Fatal(err)
	}
	return v, mm, data0, data2
}

// crashExpectNoHole crashes v without a flush (no member write is lost:
// the metadata writes flushed everything), reassembles it without the
// slots in gone and checks that block 0 reads p and that no write-hole
// stripe is counted: no member was lost with the crash.
func crashExpectNoHole(t *testing.T, v *Volume, mm []*MemMember, p []byte, gone ...int) {
	t.Helper()
	if v.Status().JournalRecords != 1 {
		t.Fatalf("%d journal records, want 1", v.Status().JournalRecords)
	}
	v.Abandon()
	v, err := Assemble(crashAll(mm, gone), nil, Options{Logger: quietLogger(), SyncResync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, layout.BlockSize)
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, p) {
		t.Fatal("block 0 reads back wrong")
	}
	if n := v.Status().WriteHoleStripes; n != 0 {
		t.Fatalf("%d write-hole stripes although no member was lost with the crash", n)
	}
}

// A member that fails after a journaled write's data and parity writes
// completed, but before its record left the in-flight set, must not leave
// that record behind unretired: it lacks the failed member's chunk, so an
// assembly after a crash would take the stripe for a write hole although
// the failure's metadata write made the write durable and no member was
// lost with the crash.
func TestJournalMemberFailsAsWriteCompletes(t *testing.T) {
	var (
		v            *Volume
		mm           []*MemMember
		data0, data2 int
		once         sync.Once
	)
	opts := Options{Logger: quietLogger()}
	hooks := testHooks{}
	hooks.beforeJournalDone = func(stripe int64) {
		once.Do(func() {
			// The third data member of the stripe fails now; the
			// volume notices (metadata write, retire) while the
			// record is still in flight.
			mm[data2].SetFailed(true)
			if err := v.FailMember(data2); err != nil {
				t.Error(err)
			}
		})
	}
	p := bytes.Repeat([]byte{0xa5}, layout.BlockSize)
	v, mm, data0, data2 = degradedJournalVolume(t, opts, hooks)
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	crashExpectNoHole(t, v, mm, p, data0, data2)
}

// A member failure first noticed by a metadata write (here ReAdd's) must
// retire the records written while the member was in sync, as a failure
// noticed by an I/O error does: they lack its chunk, so an assembly after
// a crash would take their stripes for write holes although the metadata
// write made them durable and no member was lost with the crash.
func TestJournalMemberFailureNoticedByMetadataWrite(t *testing.T) {
	p := bytes.Repeat([]byte{0x5a}, layout.BlockSize)
	v, mm, data0, data2 := degradedJournalVolume(t, Options{Logger: quietLogger()})
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	// The third data member fails with no I/O to notice; the member that
	// returns into slot data0 is added by a metadata write, which does.
	mm[data2].SetFailed(true)
	mm[data0].SetFailed(false)
	if err := v.ReAdd(mm[data0], "returned"); err != nil {
		t.Fatal(err)
	}
	if r := v.Status().Members[data2].Role; r != superblock.RoleFailed {
		t.Fatalf("slot %d is %s after the metadata write, want failed", data2, r)
	}
	crashExpectNoHole(t, v, mm, p, data2)
}
