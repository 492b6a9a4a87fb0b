package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func memMembers(n int, size int64) ([]*MemMember, []Member) {
	mm := make([]*MemMember, n)
	devs := make([]Member, n)
	for i := range mm {
		mm[i] = NewMemMember(size)
		devs[i] = mm[i]
	}
	return mm, devs
}

func newTestVolume(t testing.TB, cfg Config, size int64) (*Volume, []*MemMember) {
	t.Helper()
	g := layout.Geometry{K: cfg.K, M: cfg.M, Groups: max(cfg.Groups, 1)}
	mm, devs := memMembers(g.Members(), size)
	if cfg.RegionSize == 0 {
		cfg.RegionSize = 256 << 10
	}
	if cfg.DataOffset == 0 {
		cfg.DataOffset = 256 << 10
	}
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return v, mm
}

func TestWriteReadHealthyAndDegraded(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "r5", K: 3, M: 1, ChunkSize: 4096},
		{Name: "r6", K: 4, M: 2, ChunkSize: 8192, Groups: 2},
		{Name: "m3", K: 5, M: 3, ChunkSize: 4096},
	} {
		t.Run(cfg.Name, func(t *testing.T) {
			v, mm := newTestVolume(t, cfg, 1<<20)
			rng := rand.New(rand.NewPCG(1, uint64(cfg.K)))
			model := make([]byte, v.Size())
			check := func(what string) {
				t.Helper()
				got := make([]byte, v.Size())
				if _, err := v.ReadAt(got, 0); err != nil {
					t.Fatalf("%s: read: %v", what, err)
				}
				if !bytes.Equal(got, model) {
					t.Fatalf("%s: volume differs from model", what)
				}
			}
			write := func() {
				blocks := v.Size() / layout.BlockSize
				off := rng.Int64N(blocks) * layout.BlockSize
				n := (1 + rng.Int64N(min(blocks-off/layout.BlockSize, 40))) * layout.BlockSize
				p := make([]byte, n)
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				if _, err := v.WriteAt(p, off); err != nil {
					t.Fatalf("write: %v", err)
				}
				copy(model[off:], p)
			}
			for i := 0; i < 100; i++ {
				write()
			}
			check("healthy")
			// Fail m members of group 0 one by one, writing in between.
			for f := 0; f < cfg.M; f++ {
				mm[f*2%v.geo.Width()].SetFailed(true)
				for i := 0; i < 50; i++ {
					write()
				}
				check("degraded")
			}
			if rep, err := v.Scrub(context.Background(), false, RebuildOptions{}); err != nil || rep.Mismatches != 0 {
				t.Fatalf("scrub: %+v %v", rep, err)
			}
			// One more failure loses data: errors, never wrong data.
			for i := range mm[:v.geo.Width()] {
				mm[i].SetFailed(true)
			}
			buf := make([]byte, v.Size())
			if _, err := v.ReadAt(buf, 0); !errors.Is(err, ErrVolumeFailed) && !errors.Is(err, ErrTooManyFailures) {
				t.Fatalf("read with m+1 failures: %v", err)
			}
			if _, err := v.WriteAt(buf[:4096], 0); !errors.Is(err, ErrVolumeFailed) && !errors.Is(err, ErrTooManyFailures) {
				t.Fatalf("write with m+1 failures: %v", err)
			}
			if !v.Status().Failed {
				t.Fatal("volume not failed after m+1 member failures")
			}
		})
	}
}

func TestReplaceRebuild(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "rb", K: 4, M: 2, ChunkSize: 4096}, 2<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	model := make([]byte, v.Size())
	for i := range model {
		model[i] = byte(rng.Uint32())
	}
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	mm[1].SetFailed(true)
	mm[4].SetFailed(true)
	p := bytes.Repeat([]byte{7}, 3*layout.BlockSize)
	if _, err := v.WriteAt(p, 5*layout.BlockSize); err != nil {
		t.Fatal(err)
	}
	copy(model[5*layout.BlockSize:], p)
	for _, slot := range []int{1, 4} {
		if err := v.Replace(slot, NewMemMember(2<<20), "new"); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Rebuild(context.Background(), RebuildOptions{CheckpointRows: 7}); err != nil {
		t.Fatal(err)
	}
	st := v.Status()
	for _, m := range st.Members {
		if m.Role != superblock.RoleActive {
			t.Fatalf("after rebuild: %+v", m)
		}
	}
	// Now lose two other members: the rebuilt ones must carry the data.
	mm[0].SetFailed(true)
	mm[2].SetFailed(true)
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("data differs after rebuild")
	}
}

// The bitmap is set before writes, cleared lazily after two idle flushes
// and fully at Close, which marks the volume clean.
func TestBitmapLifecycle(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "bm", K: 2, M: 1, ChunkSize: 4096, RegionSize: 16 << 10}, 1<<20)
	if n := v.Status().DirtyRegions; n != 0 {
		t.Fatalf("fresh volume has %d dirty regions", n)
	}
	p := make([]byte, 4096)
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if n := v.Status().DirtyRegions; n != 1 {
		t.Fatalf("after one write: %d dirty regions", n)
	}
	// Durable before the data: visible in every member's bitmap area.
	for i, m := range mm {
		b := make([]byte, 1)
		if _, err := m.ReadAt(b, defaultBitmapOffset); err != nil || b[0] != 1 {
			t.Fatalf("member %d bitmap byte %x %v", i, b[0], err)
		}
	}
	if err := v.Flush(); err != nil { // written during this interval: kept
		t.Fatal(err)
	}
	if n := v.Status().DirtyRegions; n != 1 {
		t.Fatalf("after first flush: %d dirty regions", n)
	}
	if err := v.Flush(); err != nil { // idle for a whole interval: cleared
		t.Fatal(err)
	}
	if n := v.Status().DirtyRegions; n != 0 {
		t.Fatalf("after idle flush: %d dirty regions", n)
	}
	// Degraded: bits are not cleared, so a returning member can resync.
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	mm[1].SetFailed(true)
	if _, err := v.WriteAt(p, 64<<10); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.Status().DirtyRegions; n != 2 {
		t.Fatalf("degraded: %d dirty regions, want 2", n)
	}
	mm[1].SetFailed(false)
	if err := v.ReAdd(mm[1], "back"); err != nil {
		t.Fatal(err)
	}
	if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range mm {
		m.Reopen()
	}
	v, err := Assemble([]Member{mm[0], mm[1], mm[2]}, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); st.DirtyRegions != 0 || st.Degraded {
		t.Fatalf("after clean close: %+v", st)
	}
}

// A rebuild interrupted by a stop resumes from its persisted checkpoint
// after reassembly, and the result is correct.
func TestRebuildResumesAfterRestart(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "resume", K: 3, M: 1, ChunkSize: 4096}, 2<<20)
	model := make([]byte, v.Size())
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range model {
		model[i] = byte(rng.Uint32())
	}
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	mm[2].SetFailed(true)
	repl := &countingMember{MemMember: NewMemMember(2 << 20)}
	if err := v.FailMember(2); err != nil {
		t.Fatal(err)
	}
	if err := v.Replace(2, repl, "repl"); err != nil {
		t.Fatal(err)
	}
	rows := v.Geometry().Rows
	ctx, cancel := context.WithCancel(context.Background())
	// Stop the rebuild deterministically half way: the replacement
	// cancels it from its own write path (one write per run of 4 rows).
	const runRows = 4
	repl.onWrite = func(n int64) {
		if n == rows/2/runRows {
			cancel()
		}
	}
	err := v.Rebuild(ctx, RebuildOptions{CheckpointRows: 16, Workers: 1, RunRows: runRows})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("rebuild: %v", err)
	}
	cp := v.Status().Members[2].Checkpoint
	if cp == 0 || cp >= rows {
		t.Fatalf("checkpoint %d of %d rows", cp, rows)
	}
	// Restart: flush, stop uncleanly, reassemble with the replacement.
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	v.Abandon()
	devs := []Member{mm[0], mm[1], repl, mm[3]}
	v, err = Assemble(devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	st := v.Status()
	if st.Members[2].Role != superblock.RoleRebuilding || st.Members[2].Checkpoint == 0 {
		t.Fatalf("after restart: %+v", st.Members[2])
	}
	if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	mm[0].SetFailed(true) // the rebuilt member must now carry its share
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("after resumed rebuild: err %v, equal %v", err, bytes.Equal(got, model))
	}
}

// Scrub finds silent parity corruption and repairs it.
func TestScrubRepair(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "scrub", K: 4, M: 2, ChunkSize: 4096}, 1<<20)
	p := bytes.Repeat([]byte{0x5a}, int(v.Size()))
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	g := v.Geometry()
	// Corrupt the first parity chunk of row 3.
	mem := g.MemberOf(3, g.K)
	mm[mem].Corrupt(v.dataOff+g.MemberOffset(3)+100, []byte("rot"))
	ctx := context.Background()
	rep, err := v.Scrub(ctx, false, RebuildOptions{})
	if err != nil || rep.Mismatches != 1 || rep.Examples[0] != g.StripeOf(0, 3) || rep.Repaired != 0 {
		t.Fatalf("scrub: %+v %v", rep, err)
	}
	if rep, err = v.Scrub(ctx, true, RebuildOptions{}); err != nil || rep.Repaired != 1 {
		t.Fatalf("repair: %+v %v", rep, err)
	}
	if rep, err = v.Scrub(ctx, false, RebuildOptions{}); err != nil || rep.Mismatches != 0 {
		t.Fatalf("after repair: %+v %v", rep, err)
	}
}

func TestCreateDomainRule(t *testing.T) {
	_, devs := memMembers(4, 1<<20)
	cfg := Config{Name: "dom", K: 2, M: 2, ChunkSize: 4096, DataOffset: 256 << 10, RegionSize: 256 << 10,
		Domains: []string{"a", "a", "a", "b"}}
	if _, err := Create(cfg, devs, nil, Options{Logger: quietLogger()}); !errors.Is(err, layout.ErrDomain) {
		t.Fatalf("create with 3 of 4 members in one domain: %v", err)
	}
	cfg.AllowDomainViolation = true
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if v.meta.Flags&superblock.FlagDomainOverride == 0 {
		t.Fatal("override not recorded")
	}
}

// A fresh volume on members with garbage gets consistent parity from the
// initial sync.
func TestCreateInitialSync(t *testing.T) {
	g := layout.Geometry{K: 3, M: 2, Groups: 1}
	mm, devs := memMembers(g.Members(), 1<<20)
	for i, m := range mm {
		m.Corrupt(256<<10, bytes.Repeat([]byte{byte(i + 1)}, 512<<10))
	}
	v, err := Create(Config{Name: "sync", K: 3, M: 2, ChunkSize: 4096, DataOffset: 256 << 10, RegionSize: 64 << 10},
		devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := v.Scrub(context.Background(), false, RebuildOptions{})
	if err != nil || rep.Mismatches != 0 || rep.Stripes != v.Geometry().Rows {
		t.Fatalf("scrub after initial sync: %+v %v", rep, err)
	}
}

// countingMember calls onWrite with the number of data writes so far.
type countingMember struct {
	*MemMember
	writes  atomic.Int64
	onWrite func(n int64)
}

func (c *countingMember) WriteAt(p []byte, off int64) (int, error) {
	n, err := c.MemMember.WriteAt(p, off)
	if off >= 256<<10 && c.onWrite != nil {
		c.onWrite(c.writes.Add(1))
	}
	return n, err
}

func (c *countingMember) WriteAtFUA(p []byte, off int64) (int, error) {
	n, err := c.MemMember.WriteAtFUA(p, off)
	if off >= 256<<10 && c.onWrite != nil {
		c.onWrite(c.writes.Add(1))
	}
	return n, err
}

func TestWriteZeroesAndDiscard(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "zero", K: 3, M: 1, ChunkSize: 4096}, 1<<20)
	p := bytes.Repeat([]byte{0xff}, int(v.Size()))
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteZeroes(4096, v.Size()-8192); err != nil {
		t.Fatal(err)
	}
	if err := v.Discard(0, 4096); err != nil {
		t.Fatal(err)
	}
	clear(p[4096 : len(p)-4096])
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("after write zeroes: %v", err)
	}
	if err := v.WriteZeroes(1, 4096); err == nil {
		t.Fatal("unaligned write zeroes accepted")
	}
	if rep, err := v.Scrub(context.Background(), false, RebuildOptions{}); err != nil || rep.Mismatches != 0 {
		t.Fatalf("scrub: %+v %v", rep, err)
	}
}

// Close stops a running rebuild, which checkpoints, instead of leaving it
// to run on closed members.
func TestCloseStopsRebuild(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "stop", K: 2, M: 1, ChunkSize: 4096}, 4<<20)
	if err := v.FailMember(1); err != nil {
		t.Fatal(err)
	}
	mm[1].SetFailed(true)
	if err := v.Replace(1, NewMemMember(4<<20), "new"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		// Slow enough (1 MiB/s) that Close comes first.
		errc <- v.Rebuild(context.Background(), RebuildOptions{Rate: 1 << 20})
	}()
	for v.Status().Progress == nil {
		runtime.Gosched()
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("rebuild after close: %v", err)
	}
}

// An unclean stop that may have torn stripes the journal does not cover is
// refused on request and otherwise reported as write-hole stripes: a
// volume without a journal that stopped degraded, or a member lost with
// the crash (in sync on disk, so its writes were not journaled). A member
// that failed before the crash is covered by the journal.
func TestUnsafeStart(t *testing.T) {
	for _, tc := range []struct {
		name        string
		noJournal   bool
		lostAtCrash bool
		unsafe      bool
	}{
		{name: "journal, failed before the crash"},
		{name: "no journal, failed before the crash", noJournal: true, unsafe: true},
		{name: "journal, lost with the crash", lostAtCrash: true, unsafe: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Name: "hole", K: 2, M: 1, ChunkSize: 4096, RegionSize: 256 << 10, DataOffset: 256 << 10}
			mm, devs := memMembers(3, 1<<20)
			v, err := create(cfg, devs, nil, Options{Logger: quietLogger()}, testHooks{journalOff: tc.noJournal})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.lostAtCrash {
				mm[2].SetFailed(true)
			}
			p := bytes.Repeat([]byte{1}, 64<<10)
			if _, err := v.WriteAt(p, 0); err != nil {
				t.Fatal(err)
			}
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			v.Abandon() // crash, regions dirty
			for _, m := range mm[:2] {
				m.Crash(func() bool { return true })
				m.Reopen()
			}
			opts, hooks := Options{Logger: quietLogger(), RefuseUnsafeStart: true}, testHooks{journalOff: tc.noJournal}
			_, err = assemble([]Member{mm[0], mm[1]}, nil, opts, hooks)
			if tc.unsafe != (err != nil) {
				t.Fatalf("RefuseUnsafeStart: %v, want refusal %v", err, tc.unsafe)
			}
			if err != nil && (!errors.Is(err, ErrAssembly) || !strings.Contains(err.Error(), "write hole")) {
				t.Fatalf("unsafe start: %v", err)
			}
			for _, m := range mm[:2] {
				m.Reopen()
			}
			opts.RefuseUnsafeStart = false
			v, err = assemble([]Member{mm[0], mm[1]}, nil, opts, hooks)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.WaitResync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := v.Status().WriteHoleStripes; (n > 0) != tc.unsafe {
				t.Fatalf("%d write-hole stripes reported", n)
			}
			// Everything was flushed before the crash, so the data is intact.
			got := make([]byte, len(p))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, p) {
				t.Fatalf("read: %v", err)
			}
		})
	}
}

func TestCreateRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"domains":     {K: 2, M: 1, Domains: []string{"a"}, AllowDomainViolation: true},
		"data offset": {K: 2, M: 1, DataOffset: 8192},
		"unaligned":   {K: 2, M: 1, DataOffset: 1<<20 + 1},
		"geometry":    {K: 1, M: 1},
		"too small":   {K: 2, M: 1, DataOffset: 1 << 20, ChunkSize: 1 << 20},
	} {
		n := cfg.K + cfg.M
		_, devs := memMembers(n, 1<<20)
		if _, err := Create(cfg, devs, nil, Options{Logger: quietLogger()}); err == nil {
			t.Errorf("%s: created", name)
		}
	}
}

// A UUID given in the configuration is the volume's (the cluster picks it
// before the owner creates the volume); without one a random one is made.
func TestCreateGivenUUID(t *testing.T) {
	want := [16]byte{0x12, 0x34, 6: 0x40, 8: 0x80, 15: 1}
	_, devs := memMembers(3, 1<<20)
	cfg := Config{Name: "uuid", K: 2, M: 1, ChunkSize: 4096, DataOffset: 256 << 10, RegionSize: 256 << 10, UUID: want, AssumeZeroed: true}
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if v.UUID() != want {
		t.Fatalf("volume UUID %x, want %x", v.UUID(), want)
	}
	_, devs = memMembers(3, 1<<20)
	cfg.UUID = [16]byte{}
	if v, err = Create(cfg, devs, nil, Options{Logger: quietLogger()}); err != nil || v.UUID() == ([16]byte{}) || v.UUID() == want {
		t.Fatalf("volume UUID without one given: %x %v", v.UUID(), err)
	}
}
