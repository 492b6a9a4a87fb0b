//go:build linux

package ublk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/fabraid/fabraid/internal/vmtest"
	"golang.org/x/sys/unix"
)

// Guest tests. One boot runs every check as a subtest, since a boot costs
// seconds under TCG. Reference: Documentation/block/ublk.rst (control and
// data plane, user recovery).

const fabraidPkg = "github.com/fabraid/fabraid/cmd/fabraid"

func TestIntegrationUblk(t *testing.T) {
	vmtest.Run(t, vmtest.Options{
		Timeout: 8 * time.Minute,
		Guests: []vmtest.GuestConfig{{
			Name: "a", Kernel: vmtest.Kernel612, Modules: []string{"ublk_drv"}, CPUs: 2,
			Files: map[string]string{"/usr/bin/fabraid": vmtest.BuildBinary(t, fabraidPkg)},
		}},
	}, func(t *testing.T, g *vmtest.Env) {
		ctl, err := OpenControl()
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		t.Run("Features", func(t *testing.T) { testFeatures(t, ctl) })
		t.Run("IntegrityQueues2Depth4", func(t *testing.T) {
			testIntegrity(t, ctl, &Config{ID: AnyID, Queues: 2, Depth: 4, MaxIOBytes: 128 << 10, IOMin: 64 << 10, IOOpt: 128 << 10}, 4, 120)
		})
		t.Run("IntegrityAsync", func(t *testing.T) {
			testIntegrity(t, ctl, &Config{ID: AnyID, Queues: 1, Depth: 8, MaxIOBytes: 128 << 10, Async: true}, 4, 80)
		})
		t.Run("IntegrityUserCopy", func(t *testing.T) {
			testIntegrity(t, ctl, &Config{ID: AnyID, Queues: 1, Depth: 32, UserCopy: true}, 2, 100)
		})
		t.Run("IntegrityUserCopyAsync", func(t *testing.T) {
			testIntegrity(t, ctl, &Config{ID: AnyID, Queues: 2, Depth: 16, UserCopy: true, Async: true}, 3, 60)
		})
		t.Run("FlushFUADiscard", func(t *testing.T) { testFlushFUADiscard(t, ctl) })
		t.Run("BusyID", func(t *testing.T) { testBusyID(t, ctl) })
		t.Run("CloseWhileOpen", func(t *testing.T) { testCloseWhileOpen(t, ctl) })
		t.Run("ContextCancel", func(t *testing.T) { testContextCancel(t, ctl) })
		t.Run("EngineVolumeMemberFails", func(t *testing.T) { testEngineVolume(t, ctl) })
		t.Run("RecoveryAfterKill", testRecovery)
		t.Run("EngineVolumeRecoveryAfterKill", testEngineVolumeRecovery)
		t.Run("KillWithoutRecovery", testKillNoRecovery)
		t.Run("SigtermTeardown", testSigterm)
		if ids, _ := List(); len(ids) != 0 {
			t.Errorf("devices left behind: %v", ids)
		}
	})
}

func testFeatures(t *testing.T, ctl *Control) {
	f := ctl.Features()
	t.Logf("GET_FEATURES: %#x %s", uint64(f), f)
	for _, want := range []Features{FeatureUserRecovery, FeatureRecoveryReissue, FeatureIoctlEncode, FeatureUserCopy} {
		if f&want == 0 {
			t.Errorf("6.12 lacks %s", want)
		}
	}
	if err := HaveFeatures(FeatureUserRecovery | FeatureRecoveryReissue | FeatureUserCopy); err != nil {
		t.Errorf("HaveFeatures: %v", err)
	}
	// USER_RECOVERY_FAIL_IO arrived in 6.13.
	if err := HaveFeatures(FeatureRecoveryFailIO); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "6.13") {
		t.Errorf("HaveFeatures(USER_RECOVERY_FAIL_IO) on 6.12: %v", err)
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func testIntegrity(t *testing.T, ctl *Control, cfg *Config, workers, ops int) {
	const size = 16 << 20
	mem := NewMem(size)
	fds := openFDs(t)
	d, err := Create(ctl, mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		// Rings, eventfds and /dev/ublkcN are all closed again.
		if n := openFDs(t); n != fds {
			t.Errorf("%d open fds after Close, %d before Create", n, fds)
		}
	}()
	t.Logf("%s: %d queue(s) x %d, flags %s", d.BlockPath(), d.Queues(), d.Depth(), d.Flags())
	if cfg.Queues > 1 && d.Queues() != cfg.Queues {
		t.Errorf("queues %d, want %d", d.Queues(), cfg.Queues)
	}
	checkQueueLimits(t, d, cfg)
	v := newVerifier(d.BlockPath(), size, workers, 1<<20, 1)
	start := time.Now()
	if err := v.run(ops, nil); err != nil {
		t.Fatal(err)
	}
	if err := v.check(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem.data, v.model) {
		t.Fatal("backend contents differ from the model")
	}
	t.Logf("%d ops, %d MiB written in %v; backend saw %d reads, %d writes", v.ops.Load(), v.written.Load()>>20,
		time.Since(start).Round(time.Millisecond), mem.Reads.Load(), mem.Writes.Load())
}

// checkQueueLimits reads the limits the block layer derived from SET_PARAMS.
func checkQueueLimits(t *testing.T, d *Device, cfg *Config) {
	c := cfg.withDefaults()
	name := strings.TrimPrefix(d.BlockPath(), "/dev/")
	for file, want := range map[string]int{
		"logical_block_size": c.LogicalBlockSize,
		"minimum_io_size":    c.IOMin,
		"optimal_io_size":    c.IOOpt,
		"max_hw_sectors_kb":  c.MaxIOBytes >> 10,
		"write_cache":        -1,
	} {
		b, err := os.ReadFile("/sys/block/" + name + "/queue/" + file)
		if err != nil {
			t.Error(err)
			continue
		}
		got := strings.TrimSpace(string(b))
		if want == -1 {
			if got != "write back" {
				t.Errorf("%s = %q, want write back", file, got)
			}
			continue
		}
		if got != strconv.Itoa(want) {
			t.Errorf("%s = %s, want %d", file, got, want)
		}
	}
}

func testFlushFUADiscard(t *testing.T, ctl *Control) {
	const size = 8 << 20
	mem := NewMem(size)
	d, err := Create(ctl, mem, &Config{ID: AnyID})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	// Buffered write, then fsync: the data reaches the backend and a flush
	// follows it.
	// Every error path closes the block device before Close deletes it.
	f, err := os.OpenFile(d.BlockPath(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("buffered"), 4096)
	_, err = f.WriteAt(data, 1<<20)
	flushes := mem.Flushes.Load()
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem.data[1<<20:1<<20+len(data)], data) {
		t.Error("buffered write not in the backend after fsync")
	}
	if mem.Flushes.Load() == flushes {
		t.Error("fsync sent no flush to the backend")
	}

	// O_DIRECT|O_DSYNC writes carry FUA.
	f, err = os.OpenFile(d.BlockPath(), os.O_RDWR|unix.O_DIRECT|unix.O_DSYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := alignedBuf(8192)
	copy(buf, bytes.Repeat([]byte("fua!"), 2048))
	fua := mem.FUAWrites.Load()
	if _, err := f.WriteAt(buf, 2<<20); err != nil {
		t.Fatal(err)
	}
	if mem.FUAWrites.Load() == fua {
		t.Error("O_DSYNC direct write reached the backend without FUA")
	}
	if !bytes.Equal(mem.data[2<<20:2<<20+8192], buf) {
		t.Error("FUA write not in the backend")
	}

	// Discard and write-zeroes.
	rng := [2]uint64{2 << 20, 8192}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKDISCARD, uintptr(unsafe.Pointer(&rng))); e != 0 {
		t.Errorf("BLKDISCARD: %v", e)
	} else if mem.Discards.Load() == 0 || !allZero(mem.data[2<<20:2<<20+8192]) {
		t.Error("discard did not reach the backend")
	}
	rng = [2]uint64{1 << 20, 8192}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&rng))); e != 0 {
		t.Errorf("BLKZEROOUT: %v", e)
	} else if mem.Zeroes.Load() == 0 || !allZero(mem.data[1<<20:1<<20+8192]) {
		t.Errorf("write zeroes did not reach the backend (%d zero ops)", mem.Zeroes.Load())
	}
	t.Logf("backend saw %d flushes, %d FUA writes, %d discards, %d write-zeroes", mem.Flushes.Load(), mem.FUAWrites.Load(), mem.Discards.Load(), mem.Zeroes.Load())
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func testBusyID(t *testing.T, ctl *Control) {
	d, err := Create(ctl, NewMem(1<<20), &Config{ID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.ID() != 7 {
		t.Fatalf("id %d, want 7", d.ID())
	}
	_, err = Create(ctl, NewMem(1<<20), &Config{ID: 7})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second device with id 7: %v, want an in-use error", err)
	}
	t.Logf("busy id: %v", err)
	// The first device is untouched.
	if info, err := ctl.Info(7); err != nil || info.State != StateLive {
		t.Fatalf("device 7 after the failed add: %+v, %v", info, err)
	}
	if ids, _ := List(); len(ids) != 1 {
		t.Fatalf("devices %v, want only 7", ids)
	}
}

// testCloseWhileOpen: Close must not wait for a consumer that keeps
// /dev/ublkbN open; the consumer's I/O fails afterwards.
func testCloseWhileOpen(t *testing.T, ctl *Control) {
	d, err := Create(ctl, NewMem(1<<20), &Config{ID: AnyID})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.BlockPath(), os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() { done <- d.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		f.Close()
		t.Fatal("Close waited for the consumer to close the block device")
	}
	if _, err := f.ReadAt(alignedBuf(4096), 0); err == nil {
		t.Error("read from a deleted device succeeded")
	}
	if _, err := os.Stat(d.CharPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there", d.CharPath())
	}
}

// testContextCancel: Run closes the device when its context is cancelled.
func testContextCancel(t *testing.T, ctl *Control) {
	d, err := Create(ctl, NewMem(1<<20), &Config{ID: AnyID})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for _, p := range []string{d.BlockPath(), d.CharPath()} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after cancel", p)
		}
	}
}

// server is a `fabraid ublk serve` child process.
type server struct {
	cmd  *exec.Cmd
	info struct {
		ID    int      `json:"id"`
		Block string   `json:"block"`
		Flags []string `json:"flags"`
	}
	stderr bytes.Buffer
}

func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{cmd: exec.Command("/usr/bin/fabraid", append([]string{"ublk", "serve", "--json"}, args...)...)}
	s.cmd.Stderr = &s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan []byte, 1)
	go func() {
		b, _ := bufio.NewReader(out).ReadBytes('\n')
		line <- b
	}()
	select {
	case b := <-line:
		if err := json.Unmarshal(b, &s.info); err != nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
			t.Fatalf("fabraid ublk serve %v: %q: %v; stderr: %s", args, b, err, s.stderr.String())
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("fabraid ublk serve %v: no device after 30s; stderr: %s", args, s.stderr.String())
	}
	return s
}

func (s *server) kill(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
}

// testRecovery kills the server with SIGKILL in the middle of a verifier run,
// three times, each time re-attaching a new server with --recover. The
// verifier must see no I/O error and no mismatch: held and reissued requests
// complete once the new server is up.
func testRecovery(t *testing.T) {
	const size = 16 << 20
	img := "/tmp/ublk-recovery.img"
	os.Remove(img)
	recoverRounds(t, fmt.Sprintf("file:%s:%d", img, size), size, 3)
}

// recoverRounds serves backend with `fabraid ublk serve`, runs the verifier
// over size bytes and kills and recovers the server rounds times.
func recoverRounds(t *testing.T, backend string, size int64, rounds int) {
	srv := startServer(t, "--backend", backend, "--queues", "2", "--depth", "16")
	id := srv.info.ID
	defer func() {
		if srv != nil {
			srv.cmd.Process.Signal(syscall.SIGTERM)
			srv.cmd.Wait()
		}
	}()
	v := newVerifier(srv.info.Block, size, 4, 256<<10, 2)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- v.run(0, stop) }()
	for round := range rounds {
		v.waitOps(40, 30*time.Second)
		before := v.ops.Load()
		srv.kill(t)
		killed := time.Now()
		srv = nil
		select {
		case err := <-done:
			t.Fatalf("round %d: verifier ended while the server was down: %v", round, err)
		case <-time.After(200 * time.Millisecond):
		}
		srv = startServer(t, "--backend", backend, "--recover", strconv.Itoa(id))
		if srv.info.ID != id {
			t.Fatalf("recovered id %d, want %d", srv.info.ID, id)
		}
		t.Logf("round %d: killed after %d ops, recovered in %v", round, before, time.Since(killed).Round(time.Millisecond))
	}
	v.waitOps(40, 30*time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("verifier: %v", err)
	}
	if err := v.check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("verifier: %d ops, %d MiB written, no error, no mismatch", v.ops.Load(), v.written.Load()>>20)
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.cmd.Wait(); err != nil {
		t.Errorf("server after SIGTERM: %v; stderr: %s", err, srv.stderr.String())
	}
	srv = nil
	if _, err := os.Stat(fmt.Sprintf("/dev/ublkc%d", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/dev/ublkc%d still there after SIGTERM", id)
	}
}

// testKillNoRecovery documents what SIGKILL does to a device without user
// recovery: the kernel removes the block device (I/O fails), /dev/ublkcN
// stays until someone deletes it.
func testKillNoRecovery(t *testing.T) {
	srv := startServer(t, "--backend", "mem:4M", "--no-recovery")
	id := srv.info.ID
	srv.kill(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(srv.info.Block); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still present 10s after SIGKILL", srv.info.Block)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(fmt.Sprintf("/dev/ublkc%d", id)); err != nil {
		t.Fatalf("/dev/ublkc%d: %v (expected it to stay until deleted)", id, err)
	}
	out, err := exec.Command("/usr/bin/fabraid", "ublk", "list").CombinedOutput()
	t.Logf("fabraid ublk list after SIGKILL: %s %v", out, err)
	if out, err := exec.Command("/usr/bin/fabraid", "ublk", "delete", strconv.Itoa(id)).CombinedOutput(); err != nil {
		t.Fatalf("fabraid ublk delete: %v: %s", err, out)
	}
	if _, err := os.Stat(fmt.Sprintf("/dev/ublkc%d", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/dev/ublkc%d still there after delete", id)
	}
}

func testSigterm(t *testing.T) {
	srv := startServer(t, "--backend", "mem:4M", "--id", "3")
	f, err := os.OpenFile(srv.info.Block, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(alignedBuf(4096), 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr: %s", err, srv.stderr.String())
	}
	for _, p := range []string{"/dev/ublkb3", "/dev/ublkc3"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after SIGTERM", p)
		}
	}
}
