//go:build linux

package uring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func newRing(t *testing.T, entries uint32, cfg *Config) *Ring {
	t.Helper()
	r, err := New(entries, cfg)
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func TestNop(t *testing.T) {
	for _, cfg := range []*Config{nil, {SQE128: true}, {CQEntries: 64}, {DeferTaskrun: true}, {CoopTaskrun: true}} {
		r := newRing(t, 8, cfg)
		if r.Entries() != 8 {
			t.Fatalf("entries %d", r.Entries())
		}
		// More rounds than entries: the ring wraps.
		for round := range 5 {
			for i := range 8 {
				sqe, err := r.NextSQE()
				if err != nil {
					t.Fatal(err)
				}
				sqe.PrepNop(uint64(round*100 + i))
			}
			if _, err := r.NextSQE(); !errors.Is(err, ErrSQFull) {
				t.Fatalf("9th SQE: %v, want ErrSQFull", err)
			}
			if r.Pending() != 8 {
				t.Fatalf("pending %d", r.Pending())
			}
			if _, err := r.SubmitAndWait(8); err != nil {
				t.Fatal(err)
			}
			var got []uint64
			r.ForEachCQE(func(c CQE) {
				if c.Err() != nil {
					t.Error(c.Err())
				}
				got = append(got, c.UserData)
			})
			if len(got) != 8 || got[0] != uint64(round*100) || got[7] != uint64(round*100+7) {
				t.Fatalf("round %d completions %v", round, got)
			}
		}
	}
}

func TestReadWriteFsync(t *testing.T) {
	r := newRing(t, 4, nil)
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	want := bytes.Repeat([]byte("fabraid!"), 512)

	sqe, _ := r.NextSQE()
	sqe.PrepWrite(fd, want, 4096, 1)
	c, err := r.WaitCQE()
	if err != nil || c.Res != int32(len(want)) || c.UserData != 1 {
		t.Fatalf("write: %+v %v", c, err)
	}
	sqe, _ = r.NextSQE()
	sqe.PrepFsync(fd, FsyncDataSync, 2)
	if c, err = r.WaitCQE(); err != nil || c.Res != 0 || c.UserData != 2 {
		t.Fatalf("fsync: %+v %v", c, err)
	}
	got := make([]byte, len(want))
	sqe, _ = r.NextSQE()
	sqe.PrepRead(fd, got, 4096, 3)
	if c, err = r.WaitCQE(); err != nil || c.Res != int32(len(got)) {
		t.Fatalf("read: %+v %v", c, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read back differs")
	}
	// An error completion carries -errno.
	sqe, _ = r.NextSQE()
	sqe.PrepRead(-1, got, 0, 4)
	if c, err = r.WaitCQE(); err != nil || c.Err() == nil {
		t.Fatalf("read from fd -1: %+v %v", c, err)
	}
	if _, ok := r.PeekCQE(); ok {
		t.Fatal("unexpected completion")
	}
}

func TestProbe(t *testing.T) {
	r := newRing(t, 2, nil)
	p, err := r.Probe()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []uint8{OpNop, OpRead, OpWrite, OpFsync} {
		if !p.Supports(op) {
			t.Errorf("op %d not supported", op)
		}
	}
	if p.Supports(255) {
		t.Error("op 255 supported")
	}
	t.Logf("last op %d, URING_CMD %v", p.LastOp, p.Supports(OpURingCmd))
}

// TestSparseBuffers: a sparse table is accepted, and a READ_FIXED naming
// one of its entries fails (nothing is installed there), as does one
// beyond the table; a ring without a table refuses READ_FIXED too.
func TestSparseBuffers(t *testing.T) {
	r := newRing(t, 4, nil)
	if err := r.RegisterSparseBuffers(8); err != nil {
		if errors.Is(err, ErrNotSupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	for _, idx := range []uint16{3, 8} {
		sqe, err := r.NextSQE()
		if err != nil {
			t.Fatal(err)
		}
		sqe.PrepReadFixed(int(f.Fd()), idx, 0, 4096, 0, uint64(idx))
		c, err := r.WaitCQE()
		if err != nil {
			t.Fatal(err)
		}
		if c.Res >= 0 {
			t.Errorf("READ_FIXED into empty entry %d returned %d, want an error", idx, c.Res)
		}
	}
}
