//go:build linux

package cluster_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockWriter writes and flushes 64 KiB blocks round-robin and keeps, per
// block, the checksum of the last write whose flush completed, and the
// completion times: the verifier of the failover, partition, move and
// fault-schedule tests.
type blockWriter struct {
	mu    sync.Mutex
	ends  []time.Time
	acked map[int]string
	quit  chan struct{}
	done  chan error
	err   error
}

func startBlockWriter(f *os.File) *blockWriter { return startPacedWriter(f, 0) }

// startPacedWriter is startBlockWriter sleeping pace after each flushed
// write (CPU left to etcd in the TCG guests over a long run).
func startPacedWriter(f *os.File, pace time.Duration) *blockWriter {
	w := &blockWriter{acked: map[int]string{}, quit: make(chan struct{}), done: make(chan error, 1)}
	buf := make([]byte, foBlock)
	if b, err := unix.Mmap(-1, 0, foBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE); err == nil {
		buf = b // page-aligned for O_DIRECT
	}
	random := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	go func() {
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				w.done <- nil
				return
			default:
			}
			blk := i % foBlocks
			for j := 0; j+8 <= len(buf); j += 8 {
				v := random.Uint64()
				for k := range 8 {
					buf[j+k] = byte(v >> (8 * k))
				}
			}
			s := sha256.Sum256(buf)
			if _, err := f.WriteAt(buf, int64(blk)*foBlock); err != nil {
				w.fail(fmt.Errorf("write block %d (write %d): %w", blk, i, err))
				return
			}
			if err := f.Sync(); err != nil {
				w.fail(fmt.Errorf("fsync after block %d (write %d): %w", blk, i, err))
				return
			}
			w.mu.Lock()
			w.ends = append(w.ends, time.Now())
			w.acked[blk] = hex.EncodeToString(s[:])
			w.mu.Unlock()
			time.Sleep(pace)
		}
	}()
	return w
}

func (w *blockWriter) fail(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
	w.done <- err
}

func (w *blockWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *blockWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ends)
}

// waitMore waits until n more writes completed than when it was called,
// failing the test (with what in the message) on a write error or after
// limit.
func (w *blockWriter) waitMore(t *testing.T, n int, limit time.Duration, what string) {
	t.Helper()
	from := w.count()
	deadline := time.Now().Add(limit)
	for w.count() < from+n {
		if err := w.failed(); err != nil {
			t.Fatalf("%s: I/O error: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: writes did not go on: %d completed, %d at the start of the wait", what, w.count(), from)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pause is the longest gap between two completions from t0 on (t0 to the
// first included) and the number of completed writes.
func (w *blockWriter) pause(t0 time.Time) (time.Duration, int) {
	gap, _, n := w.longestGap(t0)
	return gap, n
}

// longestGap is pause with the completion that ended the gap (zero: no
// completion after t0).
func (w *blockWriter) longestGap(t0 time.Time) (gap time.Duration, end time.Time, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := t0
	for _, e := range w.ends {
		if !e.After(t0) {
			continue
		}
		if d := e.Sub(prev); d > gap {
			gap, end = d, e
		}
		prev = e
	}
	return gap, end, len(w.ends)
}

// stop ends the writer and returns the flushed checksums by block.
func (w *blockWriter) stop() (map[int]string, error) {
	if err := w.failed(); err != nil {
		return nil, err
	}
	close(w.quit)
	if err := <-w.done; err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, nil
}
