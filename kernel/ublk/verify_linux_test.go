//go:build linux

package ublk

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// alignedBuf returns n bytes aligned to 4096, as O_DIRECT needs.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & 4095)
	return b[off : off+n : off+n]
}

// verifier writes and reads random block ranges of a block device and
// checks every byte it reads against a model of what it wrote. Each worker
// owns a disjoint region, so the model needs no ordering between workers.
type verifier struct {
	path    string
	flags   int // extra open flags (O_DIRECT, O_DSYNC)
	size    int64
	block   int
	maxLen  int
	workers int
	seed    uint64

	model   []byte
	ops     atomic.Int64
	written atomic.Int64
}

func newVerifier(path string, size int64, workers, maxLen int, seed uint64) *verifier {
	return &verifier{path: path, flags: unix.O_DIRECT, size: size, block: 4096, maxLen: maxLen, workers: workers, seed: seed, model: make([]byte, size)}
}

// run executes ops operations per worker, or until stop is closed when ops
// is 0. It returns the first error or mismatch.
func (v *verifier) run(ops int, stop <-chan struct{}) error {
	var wg sync.WaitGroup
	errs := make(chan error, v.workers)
	region := v.size / int64(v.workers) / int64(v.block) * int64(v.block)
	for w := range v.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := v.worker(w, int64(w)*region, region, ops, stop); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (v *verifier) worker(w int, base, region int64, ops int, stop <-chan struct{}) error {
	f, err := os.OpenFile(v.path, os.O_RDWR|v.flags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(v.seed, uint64(w)))
	buf := alignedBuf(v.maxLen)
	blocks := region / int64(v.block)
	for i := 0; ops == 0 || i < ops; i++ {
		if stop != nil {
			select {
			case <-stop:
				return nil
			default:
			}
		}
		start := rng.Int64N(blocks)
		n := 1 + rng.Int64N(min(blocks-start, int64(v.maxLen/v.block)))
		off := base + start*int64(v.block)
		p := buf[:n*int64(v.block)]
		if rng.IntN(10) < 6 {
			for j := 0; j < len(p); j += 8 {
				*(*uint64)(unsafe.Pointer(&p[j])) = rng.Uint64()
			}
			if _, err := f.WriteAt(p, off); err != nil {
				return fmt.Errorf("write %d+%d: %w", off, len(p), err)
			}
			copy(v.model[off:], p)
			v.written.Add(int64(len(p)))
		} else {
			if _, err := f.ReadAt(p, off); err != nil {
				return fmt.Errorf("read %d+%d: %w", off, len(p), err)
			}
			if want := v.model[off : off+int64(len(p))]; !bytes.Equal(p, want) {
				return fmt.Errorf("read %d+%d: %s", off, len(p), firstDiff(p, want, off))
			}
		}
		v.ops.Add(1)
	}
	return nil
}

// waitOps waits until the verifier has done n more operations than it had
// at the call, or until timeout: progress, not wall time, paces the tests, so
// they hold on a slow or loaded CI machine.
func (v *verifier) waitOps(n int64, timeout time.Duration) {
	target := v.ops.Load() + n
	deadline := time.Now().Add(timeout)
	for v.ops.Load() < target && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// check reads the whole device and compares it with the model.
func (v *verifier) check() error {
	f, err := os.OpenFile(v.path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := alignedBuf(1 << 20)
	for off := int64(0); off < v.size; off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), v.size-off)]
		if _, err := f.ReadAt(p, off); err != nil {
			return fmt.Errorf("read back %d: %w", off, err)
		}
		if want := v.model[off : off+int64(len(p))]; !bytes.Equal(p, want) {
			return fmt.Errorf("read back: %s", firstDiff(p, want, off))
		}
	}
	return nil
}

func firstDiff(got, want []byte, base int64) string {
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("mismatch at byte %d: got %#x, want %#x", base+int64(i), got[i], want[i])
		}
	}
	return "no mismatch"
}
