//go:build linux

package volmgr_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/ublk"
)

// ProductModules are the modules the one-node product path needs.
var productModules = []string{"ublk_drv", "nvmet_tcp", "nvme_tcp"}

// TestIntegrationVolumePath is the one-node product path on 6.12: claimed
// virtio disks -> 4+2 engine volume -> ublk -> nvmet export -> nvme-tcp
// connection to 127.0.0.1 -> the multipath head, with a verifier writing
// and reading through the head while two members fail (one by `volume
// fail`, one by pulling its disk out of the guest), are replaced and
// rebuilt, and a scrub checks parity.
func TestIntegrationVolumePath(t *testing.T) {
	disks := make([]vmtest.Disk, 8)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 32 << 20}
	}
	vmtest.Run(t, vmtest.Options{
		Guests:  []vmtest.GuestConfig{{Name: "a", Kernel: vmtest.Kernel612, Modules: productModules, Disks: disks}},
		Timeout: 150 * time.Second,
	}, volumePathGuest)
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(4096 - uintptr(unsafe.Pointer(&b[0]))%4096)
	return b[off : off+n]
}

// verifier writes generation-tagged blocks through dev and reads them back.
type verifier struct {
	f      *os.File
	size   int64
	mu     sync.Mutex
	want   map[int64]uint64 // block -> seed of its content
	ops    atomic.Int64
	errors atomic.Int64
}

const vblock = 256 << 10

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

func (v *verifier) write(blk int64, seed uint64) error {
	b := alignedBuf(vblock)
	fill(b, seed)
	if _, err := v.f.WriteAt(b, blk*vblock); err != nil {
		return fmt.Errorf("write block %d: %w", blk, err)
	}
	v.mu.Lock()
	v.want[blk] = seed
	v.mu.Unlock()
	v.ops.Add(1)
	return nil
}

func (v *verifier) check(blk int64) error {
	v.mu.Lock()
	seed, ok := v.want[blk]
	v.mu.Unlock()
	if !ok {
		return nil
	}
	b, w := alignedBuf(vblock), make([]byte, vblock)
	if _, err := v.f.ReadAt(b, blk*vblock); err != nil {
		return fmt.Errorf("read block %d: %w", blk, err)
	}
	fill(w, seed)
	if !bytes.Equal(b, w) {
		return fmt.Errorf("block %d: data differs from what was written", blk)
	}
	v.ops.Add(1)
	return nil
}

func (v *verifier) checkAll() error {
	for blk := int64(0); blk < v.size/vblock; blk++ {
		if err := v.check(blk); err != nil {
			return err
		}
	}
	return nil
}

// run writes and checks random blocks until stop is closed.
func (v *verifier) run(t *testing.T, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	r := rand.New(rand.NewPCG(1, 2))
	nblk := v.size / vblock
	for i := uint64(100); ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		blk := r.Int64N(nblk)
		err := v.write(blk, i)
		if err == nil {
			err = v.check(r.Int64N(nblk))
		}
		if err != nil {
			v.errors.Add(1)
			t.Errorf("verifier: %v", err)
			return
		}
	}
}

func waitTask(t *testing.T, m *volmgr.Manager, vol, kind string) api.Volume {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		in, err := m.Info(vol)
		if err != nil {
			t.Fatal(err)
		}
		if in.Task == "" && in.LastTask != nil && in.LastTask.Kind == kind {
			if in.LastTask.Error != "" {
				t.Fatalf("%s: %s", kind, in.LastTask.Error)
			}
			return in
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not finish in 60s", kind)
	return api.Volume{}
}

func volumePathGuest(t *testing.T, g *vmtest.Env) {
	ctx := context.Background()
	cfg := config.Default()
	cfg.NodeName = "a"
	cfg.StateDir = "/tmp/fabraid"
	dh := drive.System(cfg.StateDir)
	for _, d := range g.Disks {
		if _, err := dh.Claim(d, false); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := volmgr.New(volmgr.Options{Config: cfg, Drives: dh, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	in, err := m.Create(ctx, api.CreateRequest{Name: "vol0", K: 4, M: 2, Drives: g.Disks[:6]})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created in %v: %+v", time.Since(t0), in)
	if !strings.HasPrefix(in.Device, "/dev/nvme") || in.State != "optimal" || in.K != 4 || in.M != 2 || len(in.Members) != 6 {
		t.Fatalf("info after create: %+v", in)
	}
	// The export allows only this host; allow_any_host is 0.
	st, err := nvmet.New(nvmet.DefaultRoot).Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Subsystems) != 1 || st.Subsystems[0].NQN != in.NQN || st.Subsystems[0].AllowAnyHost || len(st.Subsystems[0].AllowedHosts) != 1 {
		t.Fatalf("nvmet state: %+v", st.Subsystems)
	}
	head := strings.TrimPrefix(in.Device, "/dev/")
	if b, _ := os.ReadFile("/sys/block/" + head + "/uuid"); strings.TrimSpace(string(b)) != in.UUID {
		t.Errorf("%s uuid %q, want %s", head, b, in.UUID)
	}

	f, err := os.OpenFile(in.Device, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := &verifier{f: f, size: 16 << 20, want: map[int64]uint64{}}
	t0 = time.Now()
	for blk := int64(0); blk < v.size/vblock; blk++ {
		if err := v.write(blk, uint64(blk)); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.checkAll(); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote and verified %d MiB through %s in %v", v.size>>20, in.Device, time.Since(t0))

	stop, done := make(chan struct{}), make(chan struct{})
	go v.run(t, stop, done)
	// Two members fail under load: slot 0 by the admin (volume fail),
	// slot 3 for real — its disk is pulled out of the guest (qemu
	// device_del) and the engine must notice from the I/O errors alone.
	time.Sleep(300 * time.Millisecond)
	if err := m.Fail("vol0", 0, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	g.RemoveDisk(t, 3)
	deadline := time.Now().Add(30 * time.Second)
	for {
		in, _ = m.Info("vol0")
		if in.Failed == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if in.State != "degraded" || in.Failed != 2 {
		t.Fatalf("after a failed and a pulled member: state %s, failed %d", in.State, in.Failed)
	}
	// Slot 0, failed by the admin, comes back from its own drive (the
	// engine still holds it) with a resync of what changed; the pulled
	// slot 3 is replaced. Each rebuild runs under the verifier.
	t0 = time.Now()
	if err := m.ReAdd("vol0", 0, 0); err != nil {
		t.Fatal(err)
	}
	in = waitTask(t, m, "vol0", "rebuild")
	t.Logf("slot 0 re-added from its own drive and resynced in %v", time.Since(t0))
	t0 = time.Now()
	if err := m.Replace("vol0", 3, g.Disks[6], 0); err != nil {
		t.Fatal(err)
	}
	in = waitTask(t, m, "vol0", "rebuild")
	t.Logf("slot 3 rebuilt onto %s in %v", g.Disks[6], time.Since(t0))
	close(stop)
	<-done
	if in.State != "optimal" || in.Failed != 0 {
		t.Errorf("after rebuilds: %+v", in)
	}
	if err := m.Scrub("vol0", false, 0); err != nil {
		t.Fatal(err)
	}
	in = waitTask(t, m, "vol0", "scrub")
	if r := in.LastTask.Scrub; r == nil || r.Mismatches != 0 || r.Skipped != 0 || r.Stripes == 0 {
		t.Errorf("scrub: %+v", in.LastTask.Scrub)
	}
	if err := v.checkAll(); err != nil {
		t.Fatal(err)
	}
	t.Logf("verifier: %d ops, %d errors; scrub %+v", v.ops.Load(), v.errors.Load(), in.LastTask.Scrub)

	// Delete refuses while the head is open, then tears everything down.
	dump := time.AfterFunc(30*time.Second, func() { dumpStacks(t) })
	defer dump.Stop()
	if err := m.Delete(ctx, "vol0"); err == nil {
		t.Fatal("delete succeeded while the device was open")
	} else {
		t.Logf("delete while open: %v", err)
	}
	f.Close()
	if err := m.Delete(ctx, "vol0"); err != nil {
		t.Fatal(err)
	}
	if st, err := nvmet.New(nvmet.DefaultRoot).Read(); err != nil || len(st.Subsystems)+len(st.Ports) != 0 {
		t.Errorf("nvmet after delete: %+v %v", st, err)
	}
	if ids, err := ublk.List(); err != nil || len(ids) != 0 {
		t.Errorf("ublk devices after delete: %v %v", ids, err)
	}
	if got := m.List(); len(got) != 0 {
		t.Errorf("volumes after delete: %+v", got)
	}
}

// dumpStacks prints every goroutine and the kernel stack of every thread of
// this process: a hang in the guest is otherwise only a timeout.
func dumpStacks(t *testing.T) {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	fmt.Fprintf(os.Stderr, "=== goroutines\n%s\n", buf[:n])
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, tk := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + tk.Name() + "/stack")
		fmt.Fprintf(os.Stderr, "=== thread %s\n%s", tk.Name(), b)
	}
}
