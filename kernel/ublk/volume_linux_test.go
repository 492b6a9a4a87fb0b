//go:build linux

package ublk

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"golang.org/x/sys/unix"
)

// faultyMember is an engine member that starts failing every I/O with EIO
// when fail is set, as a pulled drive would.
type faultyMember struct {
	engine.Member
	fail atomic.Bool
}

func (m *faultyMember) ReadAt(p []byte, off int64) (int, error) {
	if m.fail.Load() {
		return 0, unix.EIO
	}
	return m.Member.ReadAt(p, off)
}

func (m *faultyMember) WriteAt(p []byte, off int64) (int, error) {
	if m.fail.Load() {
		return 0, unix.EIO
	}
	return m.Member.WriteAt(p, off)
}

// testEngineVolume serves an engine volume (k=3, m=1, 64 KiB chunks, on
// files) through ublk and runs the verifier while one member starts failing
// every I/O mid-run: the consumer sees no error and no mismatch.
func testEngineVolume(t *testing.T, ctl *Control) {
	const members, memberSize = 4, 10 << 20
	var devs []engine.Member
	var names []string
	var faulty *faultyMember
	for i := range members {
		path := fmt.Sprintf("/tmp/member%d.img", i)
		os.Remove(path)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(memberSize); err != nil {
			t.Fatal(err)
		}
		var m engine.Member = engine.NewFileMember(f)
		if i == 1 {
			faulty = &faultyMember{Member: m}
			m = faulty
		}
		devs = append(devs, m)
		names = append(names, path)
	}
	vol, err := engine.Create(engine.Config{Name: "ublk-test", K: 3, M: 1, ChunkSize: 64 << 10, AssumeZeroed: true}, devs, names, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	geo := vol.Geometry()
	d, err := Create(ctl, vol, &Config{ID: AnyID, Queues: 2, Depth: 16, MaxIOBytes: 256 << 10, Async: true, IOMin: geo.ChunkSize, IOOpt: int(geo.StripeBytes())})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	size := vol.Size()
	t.Logf("%s: engine volume %d+%d, chunk %d, %d MiB", d.BlockPath(), geo.K, geo.M, geo.ChunkSize, size>>20)
	v := newVerifier(d.BlockPath(), size, 3, 512<<10, 3)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- v.run(0, stop) }()
	v.waitOps(30, 30*time.Second)
	before := v.ops.Load()
	faulty.fail.Store(true)
	v.waitOps(60, 30*time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("verifier with member 1 failing after %d ops: %v", before, err)
	}
	if err := v.check(); err != nil {
		t.Fatal(err)
	}
	st := vol.Status()
	if !st.Degraded {
		t.Errorf("volume not degraded after member 1 failed")
	}
	t.Logf("verifier: %d ops (%d before the failure), %d MiB written, no error, no mismatch; volume degraded=%v", v.ops.Load(), before, v.written.Load()>>20, st.Degraded)
}

// testEngineVolumeRecovery creates an engine volume on files, then serves it
// with `fabraid ublk serve --backend volume:...` and kills and recovers that
// server under the verifier: the engine restarts (assembling an unclean
// volume) under a live /dev/ublkbN.
func testEngineVolumeRecovery(t *testing.T) {
	var devs []engine.Member
	var paths []string
	for i := range 3 {
		path := fmt.Sprintf("/tmp/rmember%d.img", i)
		os.Remove(path)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(9 << 20); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, engine.NewFileMember(f))
		paths = append(paths, path)
	}
	vol, err := engine.Create(engine.Config{Name: "ublk-recovery", K: 2, M: 1, ChunkSize: 64 << 10, AssumeZeroed: true}, devs, paths, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	size := vol.Size()
	if err := vol.Close(); err != nil {
		t.Fatal(err)
	}
	recoverRounds(t, "volume:"+strings.Join(paths, ","), size, 2)
}
