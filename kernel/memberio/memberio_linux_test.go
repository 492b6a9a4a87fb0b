//go:build linux

package memberio

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/kernel/uring"
	"golang.org/x/sys/unix"
)

func newExecutor(t *testing.T) *Executor {
	t.Helper()
	e, err := NewExecutor(ExecutorConfig{Entries: 8})
	if errors.Is(err, uring.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// memberFiles creates n member files of size bytes and opens them.
func memberFiles(t *testing.T, dir string, n int, size int64) []*Member {
	t.Helper()
	var ms []*Member
	for i := range n {
		p := filepath.Join(dir, "m"+string(rune('0'+i)))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		m, err := Open(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		ms = append(ms, m)
	}
	return ms
}

// TestBatch: a batch larger than the ring runs in rounds; reads see the
// writes; bounce buffers serve unaligned addresses; a flush of a member
// with no write since its last flush is skipped.
func TestBatch(t *testing.T) {
	e := newExecutor(t)
	ms := memberFiles(t, t.TempDir(), 3, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	var ios []engine.IO
	want := map[int][]byte{}
	for i := range 20 {
		b := engine.AlignedBuffer(8192)
		for j := range b {
			b[j] = byte(rnd.IntN(256))
		}
		want[i] = b
		ios = append(ios, engine.IO{Dev: ms[i%3], Write: true, Buf: b, Off: int64(i/3) * 8192})
	}
	e.Execute(ios)
	for i := range ios {
		if ios[i].Err != nil {
			t.Fatal(ios[i].Err)
		}
	}
	// Flush all three, then again: the second round is skipped.
	fl := []engine.IO{{Dev: ms[0], Flush: true}, {Dev: ms[1], Flush: true}, {Dev: ms[2], Flush: true}}
	e.Execute(fl)
	e.Execute(fl)
	for _, m := range ms {
		if f, s := m.Stats().Flushes.Load(), m.Stats().FlushesSkipped.Load(); f != 1 || s != 1 {
			t.Errorf("%s: %d flushes, %d skipped; want 1, 1", m.Path(), f, s)
		}
	}
	var reads []engine.IO
	for i := range 20 {
		b := make([]byte, 8192+1)[1:] // unaligned: bounced when direct
		reads = append(reads, engine.IO{Dev: ms[i%3], Buf: b, Off: int64(i/3) * 8192})
	}
	e.Execute(reads)
	for i, io := range reads {
		if io.Err != nil {
			t.Fatal(io.Err)
		}
		if !bytes.Equal(io.Buf, want[i]) {
			t.Fatalf("read %d differs", i)
		}
	}
	if ms[0].Direct() && e.Stats().Bounces.Load() != 20 {
		t.Errorf("bounces %d, want 20", e.Stats().Bounces.Load())
	}
	t.Logf("direct %v; %d batches, %d enters, %d IOs", ms[0].Direct(), e.Stats().Batches.Load(), e.Stats().Enters.Load(), e.Stats().IOs.Load())
}

// TestFUA: FUA writes, in a batch and alone, read back and leave the member
// clean (no flush needed after them); an ordinary write still dirties it.
func TestFUA(t *testing.T) {
	e := newExecutor(t)
	ms := memberFiles(t, t.TempDir(), 2, 1<<20)
	a, b := engine.AlignedBuffer(4096), engine.AlignedBuffer(4096)
	for i := range a {
		a[i], b[i] = byte(i), byte(255-i)
	}
	ios := []engine.IO{{Dev: ms[0], Write: true, FUA: true, Buf: a, Off: 8192}}
	e.Execute(ios)
	if ios[0].Err != nil {
		t.Fatal(ios[0].Err)
	}
	if _, err := ms[1].WriteAtFUA(b, 4096); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]byte{a, b} {
		if ms[i].written.Load() != ms[i].flushed.Load() {
			t.Errorf("member %d: an FUA write counted as unflushed", i)
		}
		got := make([]byte, 4096)
		if _, err := ms[i].ReadAt(got, int64(8192-4096*i)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("member %d: read back %v, equal %v", i, err, bytes.Equal(got, want))
		}
	}
	e.Execute([]engine.IO{{Dev: ms[0], Write: true, Buf: b, Off: 0}})
	if ms[0].written.Load() == ms[0].flushed.Load() {
		t.Error("an ordinary write left the member clean")
	}
}

// TestErrorAttribution: in one batch, the I/O of the member whose device
// fails carries the error, every other I/O succeeds.
func TestErrorAttribution(t *testing.T) {
	e := newExecutor(t)
	ms := memberFiles(t, t.TempDir(), 4, 1<<20)
	// Member 2 loses write access: its fd now refuses writes (EBADF), as a
	// device that went away refuses them (EIO).
	ro, err := os.Open(ms[2].Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ms[2].fd = int(ro.Fd())
	var ios []engine.IO
	for _, m := range ms {
		ios = append(ios, engine.IO{Dev: m, Write: true, Buf: engine.AlignedBuffer(4096), Off: 4096})
	}
	ios = append(ios, engine.IO{Dev: ms[2], Buf: engine.AlignedBuffer(4096), Off: 0}) // reads still work
	e.Execute(ios)
	for i, io := range ios {
		if fail := i == 2; (io.Err != nil) != fail {
			t.Errorf("io %d on %s: err %v, want failure %v", i, io.Dev.(*Member).Path(), io.Err, fail)
		}
	}
	if !errors.Is(ios[2].Err, unix.EBADF) {
		t.Errorf("error %v does not carry EBADF", ios[2].Err)
	}
	if ms[2].written.Load() != 0 {
		t.Error("a failed write was counted as written")
	}
}

// TestVolumeIntegrity runs an engine volume on Members with the Executor:
// concurrent random writes and reads against a model.
func TestVolumeIntegrity(t *testing.T) {
	e := newExecutor(t)
	ms := memberFiles(t, t.TempDir(), 6, 8<<20)
	devs := make([]engine.Member, len(ms))
	for i, m := range ms {
		devs[i] = m
	}
	v, err := engine.Create(engine.Config{Name: "t", K: 4, M: 2, ChunkSize: 16 << 10, AssumeZeroed: true}, devs, nil, engine.Options{Executor: e})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	size := v.Size()
	const block = 4096
	model := make([]byte, size)
	var mu sync.Mutex // serialises overlapping ranges: each worker owns a slice
	var wg sync.WaitGroup
	workers := 4
	part := size / int64(workers) / block * block
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			base := int64(w) * part
			for range 200 {
				n := (1 + rnd.IntN(48)) * block
				off := base + rnd.Int64N((part-int64(n))/block)*block
				b := engine.AlignedBuffer(n)
				if rnd.IntN(2) == 0 {
					for i := range b {
						b[i] = byte(rnd.IntN(256))
					}
					if _, err := v.WriteAt(b, off); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					copy(model[off:], b)
					mu.Unlock()
				} else {
					if _, err := v.ReadAt(b, off); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					ok := bytes.Equal(b, model[off:off+int64(n)])
					mu.Unlock()
					if !ok {
						t.Errorf("read %d at %d differs from the model", n, off)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d batches, %d enters, %d IOs, %d bounces", e.Stats().Batches.Load(), e.Stats().Enters.Load(), e.Stats().IOs.Load(), e.Stats().Bounces.Load())
}
