package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// benchVolume builds a 4+2 volume on files in /dev/shm (or the test's temp
// directory when /dev/shm is missing).
func benchVolume(b *testing.B, chunk int) (*Volume, []Member) {
	return benchVolumeOpts(b, chunk, Options{Logger: quietLogger()})
}

// benchMembers creates n zero-filled member files of size bytes in
// /dev/shm (or the test's temp directory when /dev/shm is missing).
func benchMembers(b *testing.B, n int, size int64) []Member {
	b.Helper()
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = b.TempDir()
	}
	d, err := os.MkdirTemp(dir, "fabraid-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	devs := make([]Member, n)
	for i := range devs {
		f, err := os.CreateTemp(d, "member")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
			b.Fatal(err)
		}
		devs[i] = NewFileMember(f)
	}
	return devs
}

func benchVolumeOpts(b *testing.B, chunk int, opts Options) (*Volume, []Member) {
	return benchVolumeHooks(b, chunk, opts, testHooks{})
}

func benchVolumeHooks(b *testing.B, chunk int, opts Options, h testHooks) (*Volume, []Member) {
	b.Helper()
	devs := benchMembers(b, 6, 64<<20)
	v, err := create(Config{Name: "bench", K: 4, M: 2, ChunkSize: chunk, AssumeZeroed: true}, devs, nil, opts, h)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	return v, devs
}

func benchRandom(b *testing.B, write bool, degraded bool) {
	v, _ := benchVolume(b, DefaultChunkSize)
	if degraded {
		if err := v.FailMember(0); err != nil {
			b.Fatal(err)
		}
	}
	blocks := v.Size() / layout.BlockSize
	b.SetBytes(layout.BlockSize)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		p := make([]byte, layout.BlockSize)
		for pb.Next() {
			off := rng.Int64N(blocks) * layout.BlockSize
			var err error
			if write {
				_, err = v.WriteAt(p, off)
			} else {
				_, err = v.ReadAt(p, off)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRandomRead4K(b *testing.B)          { benchRandom(b, false, false) }
func BenchmarkRandomWrite4K(b *testing.B)         { benchRandom(b, true, false) }
func BenchmarkRandomReadDegraded4K(b *testing.B)  { benchRandom(b, false, true) }
func BenchmarkRandomWriteDegraded4K(b *testing.B) { benchRandom(b, true, true) }

func benchSeq(b *testing.B, write, degraded bool) {
	v, _ := benchVolume(b, DefaultChunkSize)
	if degraded {
		if err := v.FailMember(0); err != nil {
			b.Fatal(err)
		}
	}
	sb := v.Geometry().StripeBytes()
	stripes := v.Size() / sb
	b.SetBytes(sb)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		p := make([]byte, sb)
		s := rng.Int64N(stripes)
		for pb.Next() {
			s = (s + 1) % stripes
			var err error
			if write {
				_, err = v.WriteAt(p, s*sb)
			} else {
				_, err = v.ReadAt(p, s*sb)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkStripeWrite(b *testing.B) { benchSeq(b, true, false) }

// BenchmarkStripeWrite4x runs four writers per CPU (oversubscribed).
func BenchmarkStripeWrite4x(b *testing.B) {
	b.SetParallelism(4)
	benchSeq(b, true, false)
}
func BenchmarkStripeRead(b *testing.B)         { benchSeq(b, false, false) }
func BenchmarkStripeReadDegraded(b *testing.B) { benchSeq(b, false, true) }

// BenchmarkRawRandomRead4K is the baseline for BenchmarkRandomRead4K: the
// same members read directly.
func BenchmarkRawRandomRead4K(b *testing.B) {
	v, devs := benchVolume(b, DefaultChunkSize)
	blocks := v.Geometry().MemberDataBytes() / layout.BlockSize
	b.SetBytes(layout.BlockSize)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		p := make([]byte, layout.BlockSize)
		for pb.Next() {
			d := devs[rng.IntN(len(devs))]
			if _, err := d.ReadAt(p, DefaultDataOffset+rng.Int64N(blocks)*layout.BlockSize); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDegradedWriteJournal measures the stripe journal's cost: two
// 4+2 volumes (64 KiB chunks, files in /dev/shm) with member 0 failed, one
// with the journal and one without, written in alternating rounds of
// 300 ms (best round of each kept, so that other load hits both alike),
// GOMAXPROCS writers each. It reports the IOPS (4 KiB random writes) or
// MiB/s (full-stripe writes) of both and their ratio. Run with
// -benchtime=1x:
//
//	go test ./engine -run XXX -bench DegradedWriteJournal -benchtime=1x
func BenchmarkDegradedWriteJournal(b *testing.B) {
	for _, tc := range []struct {
		name   string
		stripe bool
	}{{"random4K", false}, {"stripe", true}} {
		b.Run(tc.name, func(b *testing.B) {
			vj, _ := benchVolumeOpts(b, DefaultChunkSize, Options{Logger: quietLogger()})
			vn, _ := benchVolumeHooks(b, DefaultChunkSize, Options{Logger: quietLogger()}, testHooks{journalOff: true})
			for _, v := range []*Volume{vj, vn} {
				if err := v.FailMember(0); err != nil {
					b.Fatal(err)
				}
			}
			if vj.jrn == nil || vn.jrn != nil {
				b.Fatal("journal switch not effective")
			}
			benchWritePair(b, vj, vn, tc.stripe, "journal-", "nojournal-")
			b.ReportMetric(float64(vj.jrn.forced.Load()), "forced-retires")
		})
	}
}

// benchWritePair writes 4 KiB random writes (or full-stripe writes) to
// the volumes with and without in alternating rounds of 300 ms (8 pairs per
// b.N, the order within a pair alternating, so that other load hits both
// alike) and reports both best rates, named by the prefixes, their ratio,
// and the median of the per-pair ratios (robust against load that changes
// between pairs).
func benchWritePair(b *testing.B, with, without *Volume, stripe bool, withName, withoutName string) {
	size := int64(layout.BlockSize)
	if stripe {
		size = with.Geometry().StripeBytes()
	}
	var best [2]float64
	var ratios []float64
	for i := 0; i < b.N; i++ {
		for round := 0; round < 8; round++ {
			var rate [2]float64
			for j := 0; j < 2; j++ {
				k := (j + round) % 2
				rate[k] = benchWriteRate(b, []*Volume{with, without}[k], size, 300*time.Millisecond)
				best[k] = max(best[k], rate[k])
			}
			ratios = append(ratios, rate[0]/rate[1])
		}
	}
	unit := "IOPS"
	if stripe {
		unit = "MiB/s"
		best[0] *= float64(size) / (1 << 20)
		best[1] *= float64(size) / (1 << 20)
	}
	slices.Sort(ratios)
	b.ReportMetric(best[0], withName+unit)
	b.ReportMetric(best[1], withoutName+unit)
	b.ReportMetric(best[0]/best[1], "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}

// BenchmarkOwnerJournal measures the cost of owner-domain journaling on
// healthy writes: two healthy 4+2 volumes (64 KiB chunks, default layout,
// files in /dev/shm) whose members are spread over failure domains with
// the owner holding "owner" of the 6 (1: six nodes; 2: three nodes of two
// drives; "owner-parity,": two, on the parity slots of the owner-parity
// layout, which only the volume with Options.OwnerDomain set uses), one
// with Options.OwnerDomain set and one without (rotating), written as
// BenchmarkDegradedWriteJournal does. Run with -benchtime=1x:
//
//	go test ./engine -run XXX -bench OwnerJournal -benchtime=1x
func BenchmarkOwnerJournal(b *testing.B) {
	for _, owned := range []int{1, 2, -2} { // -2: two members on the parity slots of the owner-parity layout
		for _, stripe := range []bool{false, true} {
			layout := ""
			if owned < 0 {
				layout = "owner-parity,"
			}
			name := fmt.Sprintf("%sowner=%dof6/random4K", layout, max(owned, -owned))
			if stripe {
				name = fmt.Sprintf("%sowner=%dof6/stripe", layout, max(owned, -owned))
			}
			b.Run(name, func(b *testing.B) {
				domains := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
				switch owned {
				case 2:
					domains = []string{"n0", "n0", "n1", "n1", "n2", "n2"}
				case -2:
					domains = []string{"n1", "n1", "n2", "n2", "n0", "n0"}
				}
				mk := func(owner string) *Volume {
					devs := benchMembers(b, 6, 64<<20)
					v, err := Create(Config{Name: "bench", K: 4, M: 2, Domains: domains, AssumeZeroed: true, FixedParity: owner != "" && owned < 0}, devs, nil,
						Options{Logger: quietLogger(), OwnerDomain: owner})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { v.Close() })
					return v
				}
				vo, vn := mk("n0"), mk("")
				if vo.Status().OwnerJournal != max(owned, -owned) || vn.Status().OwnerJournal != 0 {
					b.Fatal("owner-domain journaling switch not effective")
				}
				benchWritePair(b, vo, vn, stripe, "owner-", "plain-")
				b.ReportMetric(float64(vo.jrn.forced.Load()), "forced-retires")
				writes := float64(vo.IOStats().Write.Requests)
				b.ReportMetric(float64(vo.Status().JournalRecords)/writes, "records/write")
				b.ReportMetric(float64(vo.jrn.bytes.Load())/1024/writes, "journal-KiB/write")
			})
		}
	}
}

// benchWriteRate writes size-byte aligned random writes to v from
// GOMAXPROCS goroutines for d and returns writes per second.
func benchWriteRate(b *testing.B, v *Volume, size int64, d time.Duration) float64 {
	n := v.Size() / size
	var ops atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < runtimeProcs(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
			p := make([]byte, size)
			for time.Since(start) < d {
				if _, err := v.WriteAt(p, rng.Int64N(n)*size); err != nil {
					b.Error(err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(ops.Load()) / time.Since(start).Seconds()
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkAssembleDirty measures the time from Assemble to a serving
// volume after an unclean stop with N dirty regions (1 MiB of member data
// each, 4+2, 64 KiB chunks, files in /dev/shm): "sync" resyncs before
// returning (Options.SyncResync, the old behaviour), "background" returns
// after the journal replay and resyncs afterwards (not timed).
func BenchmarkAssembleDirty(b *testing.B) {
	for _, regions := range []int{1, 8, 32} {
		for _, mode := range []string{"sync", "background"} {
			b.Run(fmt.Sprintf("regions=%d/%s", regions, mode), func(b *testing.B) {
				opts := Options{Logger: quietLogger()}
				devs := benchMembers(b, 6, 64<<20)
				v, err := Create(Config{Name: "bench", K: 4, M: 2, RegionSize: 1 << 20, AssumeZeroed: true}, devs, nil, opts)
				if err != nil {
					b.Fatal(err)
				}
				regionBytes := v.bm.regionRows * v.geo.StripeBytes()
				if int64(regions)*regionBytes > v.Size() {
					b.Skip("volume too small")
				}
				p := make([]byte, layout.BlockSize)
				for r := 0; r < regions; r++ {
					if _, err := v.WriteAt(p, int64(r)*regionBytes); err != nil {
						b.Fatal(err)
					}
				}
				if err := v.Flush(); err != nil {
					b.Fatal(err)
				}
				v.Abandon()
				opts.SyncResync = mode == "sync"
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					v, err := Assemble(devs, nil, opts)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if st := v.Status(); st.DirtyRegions != int64(regions) {
						b.Fatalf("%d dirty regions, want %d", st.DirtyRegions, regions)
					}
					if err := v.WaitResync(context.Background()); err != nil {
						b.Fatal(err)
					}
					v.Abandon() // stays dirty for the next iteration
					b.StartTimer()
				}
				b.StopTimer()
				for _, d := range devs {
					_ = d.Close()
				}
			})
		}
	}
}
