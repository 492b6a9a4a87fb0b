package engine

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// runRebuildVolume makes a 4+2 volume of hooked members with 4 KiB chunks,
// fills it with random data and returns it with that data.
func runRebuildVolume(t *testing.T, hook func(memOp) error) (*Volume, []*hookMember, []byte) {
	t.Helper()
	hm, devs := hookMembers(6, 2<<20, hook)
	v, err := Create(Config{Name: "runs", K: 4, M: 2, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: 256 << 10},
		devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	model := make([]byte, v.Size())
	rng := rand.New(rand.NewPCG(31, 7))
	for i := range model {
		model[i] = byte(rng.Uint32())
	}
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	return v, hm, model
}

// checkAfterRebuild fails two members other than the rebuilt ones and
// reads the whole volume back: only the rebuilt members can supply it.
func checkAfterRebuild(t *testing.T, v *Volume, hm []*hookMember, model []byte, lose ...int) {
	t.Helper()
	for _, m := range v.Status().Members {
		if m.Role != superblock.RoleActive {
			t.Fatalf("after rebuild: %+v", m)
		}
	}
	for _, slot := range lose {
		hm[slot].SetFailed(true)
	}
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(model); off += layout.BlockSize {
		if !bytes.Equal(got[off:off+layout.BlockSize], model[off:off+layout.BlockSize]) {
			t.Fatalf("block at %d (row %d) differs after rebuild", off, off/(v.Geometry().K*v.Geometry().ChunkSize))
		}
	}
}

// A full rebuild moves RunRows rows per member I/O: each source member is
// read, and each target written, once per run of 8 chunks, and the
// targets then hold the data.
func TestRebuildRuns(t *testing.T) {
	var armed atomic.Bool
	var mu sync.Mutex
	sizes := map[bool]map[int]int{false: {}, true: {}} // write -> I/O size -> count
	hook := func(op memOp) error {
		if armed.Load() && !op.after && !op.flush && op.off >= 256<<10 {
			mu.Lock()
			sizes[op.write][op.n]++
			mu.Unlock()
		}
		return nil
	}
	v, hm, model := runRebuildVolume(t, hook)
	for _, slot := range []int{1, 4} {
		hm[slot].SetFailed(true)
	}
	p := bytes.Repeat([]byte{9}, 3*layout.BlockSize)
	if _, err := v.WriteAt(p, 40*layout.BlockSize); err != nil { // degraded
		t.Fatal(err)
	}
	copy(model[40*layout.BlockSize:], p)
	for _, slot := range []int{1, 4} {
		hm[slot] = &hookMember{MemMember: NewMemMember(2 << 20), slot: slot, hook: hook}
		if err := v.Replace(slot, hm[slot], "new"); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	if err := v.Rebuild(t.Context(), RebuildOptions{YieldDelay: -1, CheckpointRows: 5}); err != nil {
		t.Fatal(err)
	}
	armed.Store(false)
	rows := v.Geometry().Rows
	run := 8 * 4096
	if got, want := sizes[false][run], 4*int(rows/8); got != want || len(sizes[false]) > 2 {
		t.Errorf("rebuild reads: %v (size -> count), want %d of %d bytes (4 sources per run of 8 rows, %d rows)", sizes[false], want, run, rows)
	}
	if got, want := sizes[true][run], 2*int(rows/8); got != want {
		t.Errorf("rebuild writes: %v, want %d of %d bytes", sizes[true], want, run)
	}
	checkAfterRebuild(t, v, hm, model, 0, 2)
}

// A returning member resyncs only its dirty regions, in runs; a source
// that fails in the middle of a run's reads sends the run row by row and
// the rebuild still completes from the others.
func TestRebuildRunsResyncAndSourceFailure(t *testing.T) {
	var failSource atomic.Bool
	const source = 3
	v, hm, model := runRebuildVolume(t, func(op memOp) error {
		if failSource.Load() && op.slot == source && !op.write && !op.after && op.n > 4096 {
			failSource.Store(false)
			return errors.New("injected read error")
		}
		return nil
	})
	const back = 1
	if err := v.FailMember(back); err != nil {
		t.Fatal(err)
	}
	// Writes in two regions while the member is away.
	for _, off := range []int64{8 * layout.BlockSize, 200 * layout.BlockSize} {
		p := bytes.Repeat([]byte{0x5a}, 20*layout.BlockSize)
		if _, err := v.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
	}
	if err := v.ReAdd(hm[back], "back"); err != nil {
		t.Fatal(err)
	}
	failSource.Store(true)
	if err := v.Rebuild(t.Context(), RebuildOptions{YieldDelay: -1}); err != nil {
		t.Fatal(err)
	}
	if failSource.Load() {
		t.Fatal("no run read the source: the resync did not run in runs")
	}
	if r := v.Status().Members[source].Role; r != superblock.RoleFailed {
		t.Fatalf("source whose run read failed: role %v, want failed", r)
	}
	// The failed source and one more member lost: the returned member
	// must hold its rows.
	hm[0].SetFailed(true)
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("data differs after the resync in runs")
	}
}

// A scrub reads each member once per run of 8 rows, verifies every row and
// names the one whose data does not match its parity.
func TestScrubRuns(t *testing.T) {
	var armed atomic.Bool
	var mu sync.Mutex
	reads := map[int]int{} // size -> count
	v, hm, _ := runRebuildVolume(t, func(op memOp) error {
		if armed.Load() && !op.after && !op.write && !op.flush && op.off >= 256<<10 {
			mu.Lock()
			reads[op.n]++
			mu.Unlock()
		}
		return nil
	})
	g := v.Geometry()
	const row = 9
	hm[g.MemberOf(row, 1)].Corrupt(v.dataOff+g.MemberOffset(row)+7, []byte("rot"))
	armed.Store(true)
	rep, err := v.Scrub(t.Context(), false, RebuildOptions{YieldDelay: -1})
	armed.Store(false)
	if err != nil || rep.Stripes != g.Rows || rep.Mismatches != 1 || rep.Examples[0] != g.StripeOf(0, row) {
		t.Fatalf("scrub: %+v %v; want %d stripes, stripe %d mismatching", rep, err, g.Rows, g.StripeOf(0, row))
	}
	if got, want := reads[8*4096], 6*int(g.Rows/8); got != want || len(reads) > 2 {
		t.Errorf("scrub reads: %v (size -> count), want %d of %d bytes", reads, want, 8*4096)
	}
	if rep, err = v.Scrub(t.Context(), true, RebuildOptions{YieldDelay: -1}); err != nil || rep.Repaired != 1 {
		t.Fatalf("repair: %+v %v", rep, err)
	}
	if rep, err = v.Scrub(t.Context(), false, RebuildOptions{YieldDelay: -1}); err != nil || rep.Mismatches != 0 {
		t.Fatalf("after repair: %+v %v", rep, err)
	}
}
