//go:build linux

package ublk

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/uring"
	"golang.org/x/sys/unix"
)

// TestBenchUblkVM compares our server (Null backend) with the kernel's
// null_blk in one 6.12 guest: 4 KiB random reads and 128 KiB sequential
// reads at queue depth 1 and 32, issued by an io_uring load generator with
// O_DIRECT. Runs alternate between the two devices and each configuration
// is repeated; the ratio is median(ublk)/median(null_blk). Under TCG only
// ratios mean anything. Run with `make vmbench` (FABRAID_VMBENCH=1).
func TestBenchUblkVM(t *testing.T) {
	if !vmtest.InGuest() && os.Getenv("FABRAID_VMBENCH") != "1" {
		t.Skip("benchmark: set FABRAID_VMBENCH=1 (make vmbench)")
	}
	vmtest.Run(t, vmtest.Options{
		Timeout: 5 * time.Minute,
		Guests: []vmtest.GuestConfig{{
			Name: "bench", Kernel: vmtest.Kernel612, Modules: []string{"ublk_drv", "null_blk"}, CPUs: benchCPUs,
			Files: map[string]string{"/usr/bin/fabraid": vmtest.BuildBinary(t, fabraidPkg)},
		}},
	}, func(t *testing.T, g *vmtest.Env) {
		// Two servers with the Null backend: one in this process (the load
		// generator's), one as its own process (`fabraid ublk serve`), as it
		// runs in production. Under TCG, switching address spaces costs far
		// more than on hardware (qemu flushes its software TLB), which
		// penalises the second; the first isolates the cost of the ublk path
		// and of our server.
		runtime.GOMAXPROCS(4) // keep a P idle for each locked thread (see cmd/fabraid/ublk.go)
		ctl, err := OpenControl()
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		cfg := &Config{ID: AnyID, Queues: 1, Depth: 64, MaxIOBytes: 256 << 10, LogicalBlockSize: 512, PhysicalBlockSize: 512}
		d, err := Create(ctl, NewNull(1<<30), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		acfg := *cfg
		acfg.Async = true // the mode engine volumes use
		da, err := Create(ctl, NewNull(1<<30), &acfg)
		if err != nil {
			t.Fatal(err)
		}
		defer da.Close()
		srv := startServer(t, "--backend", "null:1G", "--queues", "1", "--depth", "64", "--max-io", "256K", "--block-size", "512")
		defer func() {
			srv.cmd.Process.Signal(syscall.SIGTERM)
			srv.cmd.Wait()
		}()
		devs := []string{"/dev/nullb0", d.BlockPath(), da.BlockPath(), srv.info.Block}
		modes := []string{"", "inproc", "inproc_async", "proc"}
		benches := []struct {
			name string
			bs   int
			qd   int
			seq  bool
		}{
			{"randread_4k_qd1", 4096, 1, false},
			{"randread_4k_qd32", 4096, 32, false},
			{"seqread_128k_qd1", 128 << 10, 1, true},
			{"seqread_128k_qd32", 128 << 10, 32, true},
		}
		const reps = benchReps
		dur := 1500 * time.Millisecond
		for _, b := range benches {
			res := make([][]float64, len(devs))
			for range reps {
				for i, dev := range devs {
					iops, err := loadGen(dev, b.bs, b.qd, b.seq, 1<<30, dur)
					if err != nil {
						t.Fatalf("%s on %s: %v", b.name, dev, err)
					}
					res[i] = append(res[i], iops)
				}
			}
			kern := median(res[0])
			for i := 1; i < len(devs); i++ {
				ours := median(res[i])
				line, _ := json.Marshal(map[string]any{
					"bench": "ublk_" + modes[i] + "_" + b.name, "ublk_iops": round1(ours), "null_blk_iops": round1(kern),
					"ublk_mib_s": round1(ours * float64(b.bs) / (1 << 20)), "null_blk_mib_s": round1(kern * float64(b.bs) / (1 << 20)),
					"ratio": round3(ours / kern), "reps": reps, "seconds": dur.Seconds(), "guest_cpus": benchCPUs, "kernel": g.Kernel,
				})
				// One line per benchmark on the console; make vmbench extracts them.
				fmt.Printf("VMBENCH %s\n", line)
			}
		}
	})
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// loadGen keeps qd reads of bs bytes in flight on dev for dur and returns
// the completion rate. Random reads are block aligned and uniform over
// span; sequential reads walk the device from 0.
func loadGen(dev string, bs, qd int, seq bool, span int64, dur time.Duration) (float64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ring, err := uring.New(uint32(qd), nil)
	if err != nil {
		return 0, err
	}
	defer ring.Close()
	bufs := make([][]byte, qd)
	for i := range bufs {
		bufs[i] = alignedBuf(bs)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var next int64
	offset := func() int64 {
		if seq {
			off := next
			next = (next + int64(bs)) % span
			return off
		}
		return rng.Int64N(span/int64(bs)) * int64(bs)
	}
	fd := int(f.Fd())
	for i := range qd {
		sqe, err := ring.NextSQE()
		if err != nil {
			return 0, err
		}
		sqe.PrepRead(fd, bufs[i], offset(), uint64(i))
	}
	var done int64
	var ioErr error
	start := time.Now()
	deadline := start.Add(dur)
	inflight := qd
	stopping := false
	for inflight > 0 {
		if _, err := ring.SubmitAndWait(1); err != nil {
			return 0, err
		}
		if !stopping && time.Now().After(deadline) {
			stopping = true
		}
		ring.ForEachCQE(func(c uring.CQE) {
			inflight--
			if c.Res != int32(bs) {
				if ioErr == nil {
					ioErr = fmt.Errorf("read returned %d", c.Res)
				}
				return
			}
			done++
			if stopping {
				return
			}
			sqe, _ := ring.NextSQE()
			sqe.PrepRead(fd, bufs[c.UserData], offset(), c.UserData)
			inflight++
		})
	}
	if ioErr != nil {
		return 0, ioErr
	}
	return float64(done) / time.Since(start).Seconds(), nil
}

const (
	benchCPUs = 1
	benchReps = 3
)
