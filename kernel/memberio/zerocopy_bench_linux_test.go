//go:build linux

package memberio_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/memberio"
	"github.com/fabraid/fabraid/kernel/ublk"
	"golang.org/x/sys/unix"
)

// TestBenchZeroCopyVM compares the two ublk read paths of an engine volume
// in one 7.x guest (2 vCPUs, TCG): the copy path (the kernel copies each
// read from a per-tag buffer into the request) and zero copy (AUTO_BUF_REG:
// the members read straight into the request's pages). A 4+2 volume on six
// memory-backed null_blk members, so that the member I/O costs little and
// the copy shows; healthy 1 MiB sequential reads at queue depth 8 and
// 4 KiB random reads at depth 32, O_DIRECT, over the first 512 MiB. Each
// round serves the volume once per mode (the order alternates), three
// rounds, medians; the ratio is zero copy / copy, and guest CPU-seconds
// per GiB read come from /proc/stat over the same interval. Run with
// `make vmbench` (FABRAID_VMBENCH=1).
func TestBenchZeroCopyVM(t *testing.T) {
	if !vmtest.InGuest() && os.Getenv("FABRAID_VMBENCH") != "1" {
		t.Skip("benchmark: set FABRAID_VMBENCH=1 (make vmbench)")
	}
	vmtest.RequireCaps(t, vmtest.Kernel7, "Ublk", "NullBlk", "IOUring")
	vmtest.Run(t, vmtest.Options{
		Timeout: 15 * time.Minute,
		Guests: []vmtest.GuestConfig{{Name: "zcb", Kernel: vmtest.Kernel7, CPUs: 2, MemoryMB: 2048,
			Modules: []string{"ublk_drv", "null_blk"}}},
	}, func(t *testing.T, g *vmtest.Env) {
		runtime.GOMAXPROCS(4) // an idle P for each ublk queue thread, as the engine does
		ctl, err := ublk.OpenControl()
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		paths := nullBlk(t, 0, 6, 160)
		exec, err := memberio.NewExecutor(memberio.ExecutorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Close()
		vol, err := engine.Create(engine.Config{Name: "zcb", K: 4, M: 2, AssumeZeroed: true},
			openMembers(t, paths, memberio.Options{Exclusive: true}), paths, engine.Options{Executor: exec})
		if err != nil {
			t.Fatal(err)
		}
		defer vol.Close()
		const span = 512 << 20
		if vol.Size() < span {
			t.Fatalf("volume of %d bytes, want at least %d", vol.Size(), span)
		}
		b := engine.AlignedBuffer(1 << 20)
		for off := int64(0); off < span; off += int64(len(b)) {
			fill(b, uint64(off))
			if _, err := vol.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		geo := vol.Geometry()
		stripe := int(geo.StripeBytes())
		maxIO := (max(1<<20, stripe) + stripe - 1) / stripe * stripe
		jobs := []readJob{{"seq_read_1m", 1 << 20, 8, true}, {"rand_read_4k", 4096, 32, false}}
		modes := []string{"copy", "zerocopy"}
		const rounds = 3
		got := map[string][]readSample{} // job/mode -> one sample a round
		for r := range rounds {
			for i := range modes {
				mode := modes[(i+r)%len(modes)]
				dev, err := ublk.Create(ctl, memberio.Backend{Volume: vol}, &ublk.Config{ID: ublk.AnyID, Queues: 2, Async: true,
					MaxIOBytes: maxIO, IOMin: geo.ChunkSize, IOOpt: stripe, NoZeroCopy: mode == "copy"})
				if err != nil {
					t.Fatal(err)
				}
				checkZeroCopy(t, dev, mode == "zerocopy")
				for _, j := range jobs {
					s, err := readLoad(dev.BlockPath(), j, span, time.Second, 3*time.Second)
					if err != nil {
						dev.Close()
						t.Fatalf("%s %s: %v", mode, j.name, err)
					}
					t.Logf("round %d %s %s: %.1f MiB/s, %.2f CPU-s/GiB", r, mode, j.name, s.mibs, s.cpuPerGiB)
					got[j.name+"/"+mode] = append(got[j.name+"/"+mode], s)
				}
				if err := dev.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, j := range jobs {
			c, z := medianSample(got[j.name+"/copy"]), medianSample(got[j.name+"/zerocopy"])
			line, _ := json.Marshal(map[string]any{
				"bench": "ublk_zerocopy_" + j.name, "zerocopy_mib_s": round(z.mibs, 1), "copy_mib_s": round(c.mibs, 1),
				"ratio": round(z.mibs/c.mibs, 3), "zerocopy_cpu_s_per_gib": round(z.cpuPerGiB, 2), "copy_cpu_s_per_gib": round(c.cpuPerGiB, 2),
				"cpu_ratio": round(z.cpuPerGiB/c.cpuPerGiB, 3), "iodepth": j.qd, "rounds": rounds, "guest_cpus": 2, "kernel": g.Kernel,
			})
			fmt.Printf("VMBENCH %s\n", line)
		}
	})
}

type readJob struct {
	name string
	bs   int
	qd   int
	seq  bool
}

type readSample struct {
	mibs      float64 // MiB/s read
	cpuPerGiB float64 // guest CPU-seconds (all vCPUs) per GiB read
}

// readLoad keeps j.qd O_DIRECT reads of j.bs bytes in flight on dev (one
// goroutine each) over [0, span) for ramp+dur and measures the last dur.
func readLoad(dev string, j readJob, span int64, ramp, dur time.Duration) (readSample, error) {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return readSample{}, err
	}
	defer f.Close()
	var bytes, seqNext atomic.Int64
	var stop atomic.Bool
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	blocks := span / int64(j.bs)
	for w := range j.qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := engine.AlignedBuffer(j.bs)
			rnd := rand.New(rand.NewPCG(uint64(w), 5))
			for !stop.Load() {
				blk := rnd.Int64N(blocks)
				if j.seq {
					blk = seqNext.Add(1) % blocks
				}
				if _, err := unix.Pread(int(f.Fd()), buf, blk*int64(j.bs)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("read %d bytes at %d: %w", j.bs, blk*int64(j.bs), err)
					}
					mu.Unlock()
					stop.Store(true)
					return
				}
				bytes.Add(int64(j.bs))
			}
		}()
	}
	time.Sleep(ramp)
	b0, c0, t0 := bytes.Load(), busySeconds(), time.Now()
	time.Sleep(dur)
	b1, c1, el := bytes.Load(), busySeconds(), time.Since(t0)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return readSample{}, firstErr
	}
	gib := float64(b1-b0) / (1 << 30)
	if gib == 0 {
		return readSample{}, fmt.Errorf("nothing read in %s", dur)
	}
	return readSample{mibs: gib * 1024 / el.Seconds(), cpuPerGiB: (c1 - c0) / gib}, nil
}

// busySeconds is the guest's CPU time not idle or waiting, summed over
// vCPUs, from the first line of /proc/stat (USER_HZ = 100).
func busySeconds() float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	var jiffies uint64
	for i, field := range strings.Fields(first) {
		switch i {
		case 0, 4, 5: // "cpu", idle, iowait
			continue
		}
		v, _ := strconv.ParseUint(field, 10, 64)
		jiffies += v
	}
	return float64(jiffies) / 100
}

func medianSample(s []readSample) readSample {
	byRate := append([]readSample(nil), s...)
	sort.Slice(byRate, func(a, b int) bool { return byRate[a].mibs < byRate[b].mibs })
	cpu := make([]float64, len(s))
	for i := range s {
		cpu[i] = s[i].cpuPerGiB
	}
	sort.Float64s(cpu)
	return readSample{mibs: byRate[len(s)/2].mibs, cpuPerGiB: cpu[len(s)/2]}
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
