package engine

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// tornSetup creates a 4+1 volume, fills it, dirties the regions in
// dirtyRegions with flushed writes, crashes, and then overwrites the parity
// of every row of those regions with garbage: stripes torn by the crash, as
// far as parity goes. It returns the members and the volume's contents.
func tornSetup(t *testing.T, dirtyRegions []int64) ([]*MemMember, []byte, layout.Geometry, int64) {
	t.Helper()
	cfg := Config{Name: "bg", K: 4, M: 1, ChunkSize: 4096, RegionSize: 4 * 4096, DataOffset: 256 << 10}
	size := int64(256<<10) + 64*4096
	v, mm := newTestVolume(t, cfg, size)
	g := v.geo
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, v.Size())
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if _, err := v.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil { // idle for a whole interval: every bit cleared
		t.Fatal(err)
	}
	if n := v.Status().DirtyRegions; n != 0 {
		t.Fatalf("%d dirty regions after two flushes", n)
	}
	regionRows := v.bm.regionRows
	for _, r := range dirtyRegions {
		off := r * regionRows * g.StripeBytes()
		if _, err := v.WriteAt(data[off:off+4096], off); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	v.Abandon()
	garbage := bytes.Repeat([]byte{0xa5}, g.ChunkSize)
	for _, m := range mm {
		m.Crash(nil)
		m.Reopen()
	}
	for _, r := range dirtyRegions {
		for row := r * regionRows; row < (r+1)*regionRows; row++ {
			slot := g.Slot(0, g.MemberOf(row, g.K))
			mm[slot].Corrupt(cfg.DataOffset+g.MemberOffset(row), garbage)
		}
	}
	return mm, data, g, regionRows
}

func assembleAll(t *testing.T, mm []*MemMember, opts Options, hs ...testHooks) *Volume {
	t.Helper()
	devs := make([]Member, len(mm))
	for i, m := range mm {
		m.Reopen()
		devs[i] = m
	}
	opts.Logger = quietLogger()
	var h testHooks
	if len(hs) > 0 {
		h = hs[0]
	}
	v, err := assemble(devs, nil, opts, h)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func checkAll(t *testing.T, v *Volume, want []byte, what string) {
	t.Helper()
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%s: differs at byte %d", what, i)
	}
}

// TestBackgroundResync: after an unclean stop with dirty regions, assembly
// returns before the resync ran (held by a gate), Status reports it,
// healthy reads need no parity, and writes to rows the resync has not
// reached (read-modify-write, which would combine the new data with torn
// parity) leave consistent parity: a scrub after the resync finds nothing.
// With the per-stripe resync deliberately skipped, the same scrub finds
// the mismatches — the check is sensitive to that bug.
func TestBackgroundResync(t *testing.T) {
	for _, skip := range []bool{false, true} {
		name := "resync-before-write"
		if skip {
			name = "deliberately-skipped"
		}
		t.Run(name, func(t *testing.T) {
			dirty := []int64{1, 4, 5, 9}
			mm, data, g, regionRows := tornSetup(t, dirty)
			gate := make(chan struct{})
			v := assembleAll(t, mm, Options{}, testHooks{resyncGate: gate, skipDemandResync: skip})
			// Assembly has returned while the gate holds the resync.
			st := v.Status()
			if st.ResyncRegions != int64(len(dirty)) || !v.ResyncPending() || st.DirtyRegions != int64(len(dirty)) {
				t.Fatalf("status before the resync: resync regions %d (pending %v), dirty %d, want %d",
					st.ResyncRegions, v.ResyncPending(), st.DirtyRegions, len(dirty))
			}
			checkAll(t, v, data, "before resync")

			// A flush must not clear bits of regions not yet resynced.
			for i := 0; i < 2; i++ {
				if err := v.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			if n := v.Status().DirtyRegions; n != int64(len(dirty)) {
				t.Fatalf("flush cleared bits of regions awaiting resync: %d dirty", n)
			}
			// One block into every row of the dirty regions: RMW.
			for _, r := range dirty {
				for row := r * regionRows; row < (r+1)*regionRows; row++ {
					off := row*g.StripeBytes() + 4096
					p := bytes.Repeat([]byte{byte(row)}, 4096)
					if _, err := v.WriteAt(p, off); err != nil {
						t.Fatal(err)
					}
					copy(data[off:], p)
				}
			}
			close(gate)
			if err := v.WaitResync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := v.Status(); st.ResyncRegions != 0 || st.Progress != nil || st.WriteHoleStripes != 0 {
				t.Fatalf("status after the resync: %+v", st)
			}
			rep, err := v.Scrub(context.Background(), false, RebuildOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if skip {
				if rep.Mismatches == 0 {
					t.Fatal("writes did read-modify-write against torn parity, and the scrub did not notice")
				}
				t.Logf("skipped per-stripe resync: scrub finds %d mismatching stripes (expected)", rep.Mismatches)
				return
			}
			if rep.Mismatches != 0 {
				t.Fatalf("scrub after background resync: %+v", rep)
			}
			checkAll(t, v, data, "after resync")
			// With parity trusted again, a lost member reconstructs.
			mm[2].SetFailed(true)
			checkAll(t, v, data, "degraded after resync")
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBackgroundResyncInterrupted: Status shows the running resync as a
// "resync" task; Close cancels it and leaves the volume dirty, so the next
// assembly resyncs the same regions again, and so does one after a crash
// in the middle.
func TestBackgroundResyncInterrupted(t *testing.T) {
	dirty := []int64{0, 3, 7, 8, 12}
	mm, data, _, _ := tornSetup(t, dirty)
	for round, stop := range []string{"close", "crash"} {
		// About one row per second: it stays in the middle.
		v := assembleAll(t, mm, Options{Resync: RebuildOptions{Workers: 1, Rate: 5 * 4096}})
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			if p := v.Status().Progress; p != nil && p.Kind == "resync" {
				if p.Total != int64(len(dirty))*4 {
					t.Fatalf("resync progress %+v, want %d rows", p, len(dirty)*4)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no resync progress reported")
			}
		}
		checkAll(t, v, data, "during resync")
		switch stop {
		case "close":
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
		case "crash":
			v.Abandon()
			for _, m := range mm {
				m.Crash(func() bool { return true })
			}
		}
		v = assembleAll(t, mm, Options{}, testHooks{resyncGate: make(chan struct{})})
		if n := v.Status().ResyncRegions; n != int64(len(dirty)) {
			t.Fatalf("round %d (%s): next assembly resyncs %d regions, want %d", round, stop, n, len(dirty))
		}
		v.Abandon()
		for _, m := range mm {
			m.Crash(func() bool { return true })
		}
	}
	v := assembleAll(t, mm, Options{})
	if err := v.WaitResync(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := v.Scrub(context.Background(), false, RebuildOptions{})
	if err != nil || rep.Mismatches != 0 {
		t.Fatalf("scrub after the resync: %+v %v", rep, err)
	}
	checkAll(t, v, data, "after resync")
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean stop after a finished resync: nothing to resync.
	v = assembleAll(t, mm, Options{})
	if v.ResyncPending() {
		t.Fatal("resync after a clean stop")
	}
	_ = v.Close()
}

// TestSyncResync: with Options.SyncResync the parity is consistent when
// Assemble returns.
func TestSyncResync(t *testing.T) {
	mm, data, _, _ := tornSetup(t, []int64{2, 6})
	v := assembleAll(t, mm, Options{SyncResync: true})
	if v.ResyncPending() || v.Status().ResyncRegions != 0 {
		t.Fatal("resync pending after a synchronous resync")
	}
	rep, err := v.Scrub(context.Background(), false, RebuildOptions{})
	if err != nil || rep.Mismatches != 0 {
		t.Fatalf("scrub: %+v %v", rep, err)
	}
	checkAll(t, v, data, "after sync resync")
	_ = v.Close()
}

// TestScrubBeforeResync: a scrub that gets the background lock before the
// resync (here the gate holds the resync back) resyncs the rows the crash
// may have torn instead of reporting them as damage; the resync then finds
// them done.
func TestScrubBeforeResync(t *testing.T) {
	mm, data, _, _ := tornSetup(t, []int64{1, 3})
	gate := make(chan struct{})
	v := assembleAll(t, mm, Options{}, testHooks{resyncGate: gate})
	rep, err := v.Scrub(context.Background(), false, RebuildOptions{})
	if err != nil || rep.Mismatches != 0 {
		t.Fatalf("scrub before the resync: %+v %v", rep, err)
	}
	close(gate)
	if err := v.WaitResync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rep, err := v.Scrub(context.Background(), false, RebuildOptions{}); err != nil || rep.Mismatches != 0 {
		t.Fatalf("scrub after the resync: %+v %v", rep, err)
	}
	checkAll(t, v, data, "after resync")
	_ = v.Close()
}
