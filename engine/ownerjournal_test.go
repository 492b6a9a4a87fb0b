package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// TestJournalCrashOwnerDomain is TestJournalCrash for the owner's write
// hole: in every group 1..m members are in the owner's failure domain
// (some groups degraded besides, up to m lost in all), the power is cut in
// the middle of concurrent writes, and the owner's members are lost at the
// cut with it; the volume is reassembled without them. Without owner-domain
// journaling some runs read back wrong blocks (the test reaches the hole);
// with it none does, and no write-hole stripe is counted.
func TestJournalCrashOwnerDomain(t *testing.T) {
	seed := testSeed(t)
	iters := 40
	if *longRun {
		iters = 400
	}
	if testing.Short() {
		iters = 10
	}
	for _, on := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(seed, 11))
		failedRuns, badBlocks, cuts := 0, 0, 0
		for i := 0; i < iters; i++ {
			bad, desc := crashRun(t, rng, crashCase{owner: true, ownerJournal: on})
			if bad > 0 {
				failedRuns++
				badBlocks += bad
				if on {
					t.Fatalf("owner-domain journaling: iteration %d: %s: %d blocks read back neither their flushed value nor a value written since",
						i, desc, bad)
				}
				if failedRuns == 1 {
					t.Logf("without owner-domain journaling, first torn run: iteration %d: %s: %d bad blocks", i, desc, bad)
				}
			}
			if bytes.Contains([]byte(desc), []byte("power cut")) {
				cuts++
			}
		}
		t.Logf("owner-domain journaling %v: %d of %d runs read back wrong data (%d blocks); %d runs had the power cut in the middle of the writes",
			on, failedRuns, iters, badBlocks, cuts)
		if !on && failedRuns == 0 && !testing.Short() {
			t.Fatal("no run lost data without owner-domain journaling: the crash test does not reach the owner's write hole")
		}
	}
}

// TestJournalCrashOwnerParity is TestJournalCrashOwnerDomain on the
// owner-parity layout (Config.FixedParity) with the owner's members among
// each group's parity members, in two cases. Healthy but for the owner,
// with owner-domain journaling OFF: losing the owner's members at the
// cut loses parity only, so no run reads back a wrong block although
// nothing logs anything (with the layout made to rotate, runs do).
// Degraded besides, with owner-domain journaling on, as every cluster
// volume runs: no run reads back a wrong block either (journaling off
// would let a degraded stripe's record land on the owner's members and
// be lost with them).
func TestJournalCrashOwnerParity(t *testing.T) {
	seed := testSeed(t)
	iters := 40
	if testing.Short() {
		iters = 10
	}
	for _, c := range []crashCase{
		{owner: true, fixedParity: true, noDegrade: true},
		{owner: true, fixedParity: true, ownerJournal: true},
	} {
		rng := rand.New(rand.NewPCG(seed, 12))
		cuts := 0
		for i := 0; i < iters; i++ {
			bad, desc := crashRun(t, rng, c)
			if bad > 0 {
				t.Fatalf("owner-parity layout, degraded %v, owner journal %v: iteration %d: %s: %d blocks read back neither their flushed value nor a value written since",
					!c.noDegrade, c.ownerJournal, i, desc, bad)
			}
			if bytes.Contains([]byte(desc), []byte("power cut")) {
				cuts++
			}
		}
		t.Logf("owner-parity layout, degraded %v, owner journal %v: %d runs, none read back wrong data; %d had the power cut in the middle of the writes",
			!c.noDegrade, c.ownerJournal, iters, cuts)
	}
}

// On the owner-parity layout with the owner's members on the parity
// positions, a healthy volume with owner-domain journaling on writes no
// journal record: the owner's members hold no data chunk to log. On the
// rotating layout the same writes log records.
func TestOwnerParityNoRecords(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		cfg := Config{Name: "op", K: 4, M: 2, ChunkSize: 4096, RegionSize: 32 << 10, DataOffset: 256 << 10, AssumeZeroed: true,
			Domains: []string{"n1", "n1", "n2", "n2", ownerDomain, ownerDomain}, AllowDomainViolation: true, FixedParity: fixed}
		_, devs := memMembers(6, 1<<20)
		v, err := Create(cfg, devs, nil, Options{Logger: quietLogger(), OwnerDomain: ownerDomain})
		if err != nil {
			t.Fatal(err)
		}
		p := bytes.Repeat([]byte{0x5a}, int(3*v.Geometry().StripeBytes()))
		for _, off := range []int64{0, 4096, 3 * 4096 * 4} { // full stripes, a partial write, a write over two stripes
			if _, err := v.WriteAt(p[:len(p)-int(off%16384)], off); err != nil {
				t.Fatal(err)
			}
		}
		st := v.Status()
		if fixed && st.JournalRecords != 0 || !fixed && st.JournalRecords == 0 {
			t.Errorf("fixed parity %v: %d journal records (owner-journal members %d)", fixed, st.JournalRecords, st.OwnerJournal)
		}
		if st.OwnerJournal != 2 {
			t.Errorf("fixed parity %v: %d owner-journal members, want 2", fixed, st.OwnerJournal)
		}
		v.Close()
	}
}

// ownerVolume creates a 3+2 volume (4 KiB chunks) whose members holding
// data positions 0 and 1 of stripe 0 are in the owner's domain. With on, it
// runs with owner-domain journaling. It returns the volume, its members and
// the owner's slots.
func ownerVolume(t *testing.T, on bool) (*Volume, []*MemMember, []int) {
	t.Helper()
	g := layout.Geometry{K: 3, M: 2, Groups: 1, ChunkSize: 4096}
	cfg := Config{Name: "own", K: 3, M: 2, ChunkSize: 4096, RegionSize: 32 << 10, DataOffset: 256 << 10, AssumeZeroed: true,
		Domains: []string{"n0", "n1", "n2", "n3", "n4"}}
	owners := []int{g.Slot(0, g.MemberOf(0, 0)), g.Slot(0, g.MemberOf(0, 1))}
	for _, s := range owners {
		cfg.Domains[s] = ownerDomain
	}
	opts := Options{Logger: quietLogger()}
	if on {
		opts.OwnerDomain = ownerDomain
	}
	mm, devs := memMembers(5, 1<<20)
	v, err := Create(cfg, devs, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return v, mm, owners
}

// The replay paths of owner-domain journaling, deterministically: a write
// to stripe 0 of ownerVolume completes, then the crash is emulated as a
// torn write (the named positions of the stripe hold their contents from
// before the write again: "parity" both parity chunks, "data" the
// non-owner data chunk), and the volume is reassembled without the
// owner's members. Every block must read back its old or its new value,
// the owner's chunks exactly what the write left there (reconstructed from
// the replayed record), and no write hole is counted. Without owner-domain
// journaling the same tears make the owner's chunks read back wrong, and
// the stripe counts as a write hole.
func TestOwnerJournalReplay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		off, n  int64 // the write, in blocks (block b of stripe 0 is data position b)
		tear    string
		tornBad bool // without the journal a block reads back neither its old nor its new value
	}{
		{"rmw untouched owner chunks", 2, 1, "parity", true},
		{"rmw owner chunk", 0, 1, "parity", false}, // old parity: the owner's chunks read their old values
		{"rmw data torn", 2, 1, "data", true},
		{"rcw", 0, 2, "parity", false},
		{"full stripe", 0, 3, "parity", true},
		{"full stripe data torn", 0, 3, "data", true},
	} {
		for _, on := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/owner-journal=%v", tc.name, on), func(t *testing.T) {
				v, mm, owners := ownerVolume(t, on)
				g := v.geo
				old := make([]byte, 3*layout.BlockSize)
				for i := range old {
					old[i] = byte(i*7 + 1)
				}
				if _, err := v.WriteAt(old, 0); err != nil {
					t.Fatal(err)
				}
				if err := v.Flush(); err != nil {
					t.Fatal(err)
				}
				rec0 := v.Status().JournalRecords
				// What the members hold at row 0 before the write.
				row0 := v.dataOff + g.MemberOffset(0)
				before := make([][]byte, len(mm))
				for slot, m := range mm {
					before[slot] = make([]byte, g.ChunkSize)
					if _, err := m.ReadAt(before[slot], row0); err != nil {
						t.Fatal(err)
					}
				}
				p := bytes.Repeat([]byte{0xee}, int(tc.n)*layout.BlockSize)
				if _, err := v.WriteAt(p, tc.off*layout.BlockSize); err != nil {
					t.Fatal(err)
				}
				if got := v.Status().JournalRecords - rec0; on && got != 1 || !on && got != 0 {
					t.Fatalf("%d journal records for the write", got)
				}
				for _, s := range owners {
					if js, err := scanJournal([]Member{mm[s]}, v.base); err != nil || js.maxSeq != 0 {
						t.Fatalf("owner's member %d holds a journal record (highest %d, %v)", s, js.maxSeq, err)
					}
				}
				v.Abandon()
				want := bytes.Clone(old)
				copy(want[tc.off*layout.BlockSize:], p)
				var torn []int
				switch tc.tear {
				case "parity":
					torn = []int{3, 4}
				case "data":
					torn = []int{2}
				}
				use := crashAll(mm, owners)
				for _, pos := range torn {
					slot := g.Slot(0, g.MemberOf(0, pos))
					mm[slot].Corrupt(row0, before[slot])
				}
				v, err := Assemble(use, nil, Options{Logger: quietLogger(), SyncResync: true})
				if err != nil {
					t.Fatal(err)
				}
				defer v.Close()
				got := make([]byte, len(old))
				if _, err := v.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				st := v.Status()
				bad := 0 // blocks holding neither their old nor their new value
				for b := 0; b < 3; b++ {
					blk := func(x []byte) []byte { return x[b*layout.BlockSize : (b+1)*layout.BlockSize] }
					if !bytes.Equal(blk(got), blk(old)) && !bytes.Equal(blk(got), blk(want)) {
						bad++
					}
				}
				if on {
					// The owner's chunks are reconstructed from the
					// replayed record: exactly what the write left.
					ownerOK := bytes.Equal(got[:2*layout.BlockSize], want[:2*layout.BlockSize])
					if bad != 0 || !ownerOK || st.WriteHoleStripes != 0 || st.JournalReplayed != 1 {
						t.Fatalf("%d bad blocks, owner's chunks as written %v, %d write-hole stripes, %d records replayed",
							bad, ownerOK, st.WriteHoleStripes, st.JournalReplayed)
					}
					return
				}
				if tc.tornBad != (bad > 0) {
					t.Fatalf("without owner-domain journaling: %d bad blocks, want some: %v", bad, tc.tornBad)
				}
				if st.WriteHoleStripes == 0 {
					t.Fatal("torn stripe without a record not counted as a write hole")
				}
			})
		}
	}
}

// ownerFlags reads the owner-journal flags of every member table entry
// from the superblock on m.
func ownerFlags(t *testing.T, m Member) []bool {
	t.Helper()
	sb, err := superblock.ReadCopies(m)
	if err != nil {
		t.Fatal(err)
	}
	var f []bool
	for _, e := range sb.Members {
		f = append(f, e.OwnerJournal)
	}
	return f
}

func wantFlags(owners []int, n int, on bool) []bool {
	f := make([]bool, n)
	for _, s := range owners {
		f[s] = on
	}
	return f
}

// The superblock records which members owner-domain journaling covers: set
// at creation with Options.OwnerDomain, cleared by an assembly without it,
// and after an unclean stop set only once the resync has finished (a
// stripe torn by the stop has no record until then). An assembly that
// lacks members recorded as covered counts no write hole for them and
// starts under RefuseUnsafeStart; members not recorded are counted and
// refused.
func TestOwnerJournalFlag(t *testing.T) {
	v, mm, owners := ownerVolume(t, true)
	if st := v.Status(); st.OwnerJournal != 2 {
		t.Fatalf("Status().OwnerJournal = %d, want 2", st.OwnerJournal)
	}
	if f := ownerFlags(t, mm[0]); fmt.Sprint(f) != fmt.Sprint(wantFlags(owners, 5, true)) {
		t.Fatalf("flags after create %v", f)
	}
	// Writes to a region, then a crash: the assembly resyncs in the
	// background and records the flags only when it has finished.
	p := bytes.Repeat([]byte{3}, layout.BlockSize)
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	v.Abandon()
	gate := make(chan struct{})
	v = assembleAll(t, mm, Options{OwnerDomain: ownerDomain}, testHooks{resyncGate: gate})
	if !v.ResyncPending() {
		t.Fatal("no resync pending after the crash")
	}
	if f := ownerFlags(t, mm[0]); fmt.Sprint(f) != fmt.Sprint(wantFlags(owners, 5, false)) {
		t.Fatalf("flags while the resync is pending %v, want none", f)
	}
	close(gate)
	if err := v.WaitResync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := ownerFlags(t, mm[0]); fmt.Sprint(f) != fmt.Sprint(wantFlags(owners, 5, true)) {
		t.Fatalf("flags after the resync %v", f)
	}

	// Covered: a crash with a dirty region, the owner's members lost.
	for _, refuse := range []bool{false, true} {
		if _, err := v.WriteAt(p, 0); err != nil {
			t.Fatal(err)
		}
		v.Abandon()
		use := crashAll(mm, owners)
		var err error
		v, err = Assemble(use, nil, Options{Logger: quietLogger(), SyncResync: true, RefuseUnsafeStart: refuse})
		if err != nil {
			t.Fatalf("covered, RefuseUnsafeStart %v: %v", refuse, err)
		}
		if n := v.Status().WriteHoleStripes; n != 0 {
			t.Fatalf("%d write-hole stripes for covered members", n)
		}
		// Back to the full volume with owner-domain journaling.
		v.Abandon()
		for _, m := range mm {
			m.Crash(func() bool { return true })
		}
		v = assembleAll(t, mm, Options{OwnerDomain: ownerDomain, SyncResync: true})
		if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
			t.Fatal(err)
		}
		if f := ownerFlags(t, mm[0]); fmt.Sprint(f) != fmt.Sprint(wantFlags(owners, 5, true)) {
			t.Fatalf("flags after the resync at assembly %v", f)
		}
	}
	v.Close()

	// Not covered: an assembly without OwnerDomain clears the flags, and a
	// crash that loses the owner's members counts and refuses.
	v = assembleAll(t, mm, Options{})
	if f := ownerFlags(t, mm[0]); fmt.Sprint(f) != fmt.Sprint(wantFlags(owners, 5, false)) {
		t.Fatalf("flags after an assembly without OwnerDomain %v", f)
	}
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if v.Status().JournalRecords != 0 {
		t.Fatal("healthy write journaled without OwnerDomain")
	}
	v.Abandon()
	use := crashAll(mm, owners)
	if _, err := Assemble(use, nil, Options{Logger: quietLogger(), RefuseUnsafeStart: true}); !errors.Is(err, ErrAssembly) {
		t.Fatalf("uncovered owner's members lost: RefuseUnsafeStart assembly %v", err)
	}
	for _, m := range mm {
		m.Reopen()
	}
	v, err := Assemble(use, nil, Options{Logger: quietLogger(), SyncResync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Status().WriteHoleStripes == 0 {
		t.Fatal("uncovered owner's members lost: no write hole counted")
	}
}

// Owner-domain journaling journals only stripes with a data chunk on the
// owner's members, puts no record on them, and stays off where it cannot
// help: a version 2 volume (which stays version 2), a group in which the
// owner's domain holds more than m members, and a volume without one.
func TestOwnerJournalScope(t *testing.T) {
	v, mm, owners := ownerVolume(t, true)
	g := v.geo
	journaled := 0
	for row := int64(0); row < 5; row++ {
		before := v.Status().JournalRecords
		if _, err := v.WriteAt(make([]byte, layout.BlockSize), row*g.StripeBytes()); err != nil {
			t.Fatal(err)
		}
		hasData := false
		for pos := 0; pos < g.K; pos++ {
			s := g.Slot(0, g.MemberOf(row, pos))
			hasData = hasData || s == owners[0] || s == owners[1]
		}
		if got := v.Status().JournalRecords - before; got != map[bool]int64{true: 1, false: 0}[hasData] {
			t.Fatalf("row %d (owner holds data: %v): %d records", row, hasData, got)
		}
		if hasData {
			journaled++
		}
	}
	if journaled == 0 || journaled == 5 {
		t.Fatalf("%d of 5 rows journaled: the test needs both kinds", journaled)
	}
	for _, s := range owners {
		if js, err := scanJournal([]Member{mm[s]}, v.base); err != nil || js.maxSeq != 0 {
			t.Fatalf("owner's member %d holds a record", s)
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}

	// Version 2: stays as before.
	rewriteSuperblocks(t, mm, func(sb *superblock.Superblock) {
		sb.Version = superblock.VersionJournal
		for i := range sb.Members {
			sb.Members[i].OwnerJournal = false
		}
	})
	v = assembleAll(t, mm, Options{OwnerDomain: ownerDomain})
	if st := v.Status(); st.OwnerJournal != 0 || !st.Journal {
		t.Fatalf("version 2 volume: owner journal %d, journal %v", st.OwnerJournal, st.Journal)
	}
	if _, err := v.WriteAt(make([]byte, layout.BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	if n := v.Status().JournalRecords; n != 0 {
		t.Fatalf("version 2 volume: %d records for a healthy write", n)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range mm {
		m.Reopen()
		if sb, err := superblock.ReadCopies(m); err != nil || sb.Version != superblock.VersionJournal {
			t.Fatalf("version 2 volume written back as %v (%v)", sb.Version, err)
		}
	}

	// A domain holding more than m members of its group (created with
	// the override), and a one-node volume: off.
	for _, domains := range [][]string{{"o", "o", "o", "n3", "n4"}, {"o", "o", "o", "o", "o"}} {
		_, devs := memMembers(5, 1<<20)
		v, err := Create(Config{Name: "big", K: 3, M: 2, ChunkSize: 4096, DataOffset: 256 << 10, AssumeZeroed: true,
			Domains: domains, AllowDomainViolation: true}, devs, nil, Options{Logger: quietLogger(), OwnerDomain: "o"})
		if err != nil {
			t.Fatal(err)
		}
		if n := v.Status().OwnerJournal; n != 0 {
			t.Fatalf("domains %v: owner-domain journaling covers %d members", domains, n)
		}
		v.Close()
	}
}

// FuzzOwnerJournalReplay fuzzes the replay path of owner-domain
// journaling: a volume (k 2-5, m 1-3, one group, 4 or 8 KiB chunks) with 1..m
// members in the owner's domain, one write of any block range inside one
// stripe, then a crash in which any subset of the other members missed the
// write (their chunk of that row holds its old contents again), and an
// assembly without the owner's members. Every block of the volume must read
// back its old or its new value (outside the write: exactly the old), and
// no write hole is counted.
func FuzzOwnerJournalReplay(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint8(1), uint8(0), uint8(2), uint8(1), uint8(0x18), false)
	f.Add(uint8(2), uint8(2), uint8(3), uint8(1), uint8(0), uint8(12), uint8(0x0f), true)
	f.Add(uint8(3), uint8(0), uint8(0x80), uint8(2), uint8(1), uint8(3), uint8(0xff), false)
	f.Fuzz(func(t *testing.T, kSel, mSel, ownerBits, stripe, first, count, torn uint8, bigChunk bool) {
		k, m := 2+int(kSel%4), 1+int(mSel%3)
		chunk := 4096
		if bigChunk {
			chunk = 8192
		}
		g := layout.Geometry{K: k, M: m, Groups: 1, ChunkSize: chunk}
		w := g.Width()
		cfg := Config{Name: "fz", K: k, M: m, ChunkSize: chunk, RegionSize: 32 << 10, DataOffset: 256 << 10,
			AssumeZeroed: true, Domains: make([]string, w)}
		var owners []int
		for mem := 0; mem < w; mem++ {
			cfg.Domains[mem] = fmt.Sprintf("n%d", mem)
			if ownerBits&(1<<uint(mem)) != 0 && len(owners) < m {
				owners = append(owners, mem)
			}
		}
		if len(owners) == 0 {
			owners = []int{int(ownerBits) % w}
		}
		for _, s := range owners {
			cfg.Domains[s] = ownerDomain
		}
		size := int64(256<<10) + int64(chunk)*8
		mm, devs := memMembers(w, size)
		v, err := Create(cfg, devs, nil, Options{Logger: quietLogger(), OwnerDomain: ownerDomain})
		if err != nil {
			t.Fatal(err)
		}
		old := make([]byte, v.Size())
		for i := range old {
			old[i] = byte(i*13 + i>>12 + 1)
		}
		if _, err := v.WriteAt(old, 0); err != nil {
			t.Fatal(err)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		s := int64(stripe) % (v.Size() / g.StripeBytes())
		blocks := g.StripeBytes() / layout.BlockSize
		b0 := int64(first) % blocks
		n := 1 + int64(count)%(blocks-b0)
		_, row := g.Locate(s)
		rowOff := v.dataOff + g.MemberOffset(row)
		before := make([][]byte, w)
		for slot, mem := range mm {
			before[slot] = make([]byte, chunk)
			if _, err := mem.ReadAt(before[slot], rowOff); err != nil {
				t.Fatal(err)
			}
		}
		off := s*g.StripeBytes() + b0*layout.BlockSize
		p := bytes.Repeat([]byte{0xd7}, int(n)*layout.BlockSize)
		if _, err := v.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		v.Abandon()
		var use []Member
		for slot, mem := range mm {
			mem.Crash(func() bool { return true })
			mem.Reopen()
			if slices.Contains(owners, slot) {
				continue
			}
			if torn&(1<<uint(slot)) != 0 {
				mem.Corrupt(rowOff, before[slot]) // this member missed the write
			}
			use = append(use, mem)
		}
		v, err = Assemble(use, nil, Options{Logger: quietLogger(), SyncResync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		got := make([]byte, v.Size())
		if _, err := v.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		for b := int64(0); b < v.Size()/layout.BlockSize; b++ {
			at := b * layout.BlockSize
			blk := got[at : at+layout.BlockSize]
			inWrite := at >= off && at < off+int64(len(p))
			if bytes.Equal(blk, old[at:at+layout.BlockSize]) || inWrite && bytes.Equal(blk, p[:layout.BlockSize]) {
				continue
			}
			t.Fatalf("%d+%d chunk %d, owners %v, write blocks [%d,+%d) of stripe %d, torn members %#x: block %d reads neither its old nor its new value",
				k, m, chunk, owners, b0, n, s, torn, b)
		}
		if h := v.Status().WriteHoleStripes; h != 0 {
			t.Fatalf("%d write-hole stripes", h)
		}
	})
}
