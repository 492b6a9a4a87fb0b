package engine

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/fabraid/fabraid/engine/superblock"
)

// runDirect performs a DirectRead's IOs the way a caller with its own ring
// would (here: one after another) and finishes it.
func runDirect(t *testing.T, v *Volume, p []byte, off int64) (bool, error) {
	t.Helper()
	d, ok := v.PlanRead(p, off)
	if !ok {
		return false, nil
	}
	SyncExecutor{}.Execute(d.IOs)
	_, err := d.Finish()
	return true, err
}

// TestDirectRead: a planned read returns what ReadAt returns; a member
// whose planned read fails is marked failed by Finish and the data comes
// back reconstructed; a read across stripes touching an unreadable chunk
// is not planned.
func TestDirectRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v, mm, data := filledVolume(t, "d", rng)
	defer v.Close()
	for range 50 {
		n := (1 + rng.IntN(24)) * 4096
		off := rng.Int64N((v.Size()-int64(n))/4096) * 4096
		p := make([]byte, n)
		planned, err := runDirect(t, v, p, off)
		if !planned || err != nil || !bytes.Equal(p, data[off:off+int64(n)]) {
			t.Fatalf("healthy read %d at %d: planned %v, err %v", n, off, planned, err)
		}
	}
	// Member 1 starts failing: the first planned read that touches it
	// fails that IO; Finish fails the member and reconstructs.
	mm[1].SetFailed(true)
	p := make([]byte, v.Geometry().StripeBytes()*2)
	planned, err := runDirect(t, v, p, 0)
	if !planned || err != nil || !bytes.Equal(p, data[:len(p)]) {
		t.Fatalf("read with a failing member: planned %v, err %v, equal %v", planned, err, bytes.Equal(p, data[:len(p)]))
	}
	if r := v.Status().Members[1].Role; r != superblock.RoleFailed {
		t.Fatalf("member 1 is %s after its read failed", r)
	}
	if d, ok := v.PlanRead(p, 0); ok {
		d.Finish()
		t.Fatal("a read over a failed member's chunks was planned")
	}
	if st := v.IOStats(); st.Read.Requests == 0 {
		t.Error("planned reads not counted in IOStats")
	}
}

// TestDirectReadDegraded: with a member failed, reads inside one stripe are
// still planned: the readable chunks they need, the rest reconstructed by
// Finish, and they return what ReadAt returns. A second member failing
// under a planned degraded read is failed by Finish, and the read is redone
// from the survivors. A stripe another request holds exclusively is not
// planned.
func TestDirectReadDegraded(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	v, mm, data := filledVolume(t, "dd", rng)
	defer v.Close()
	if err := v.FailMember(1); err != nil {
		t.Fatal(err)
	}
	sb := v.Geometry().StripeBytes()
	for range 100 {
		stripe := rng.Int64N(v.Size() / sb)
		n := (1 + rng.IntN(int(sb/4096))) * 4096
		off := stripe*sb + rng.Int64N((sb-int64(n))/4096+1)*4096
		p := make([]byte, n)
		planned, err := runDirect(t, v, p, off)
		if !planned || err != nil || !bytes.Equal(p, data[off:off+int64(n)]) {
			t.Fatalf("degraded read %d at %d: planned %v, err %v, equal %v", n, off, planned, err, bytes.Equal(p, data[off:off+int64(n)]))
		}
	}
	// Member 4 starts failing under a planned read of a whole stripe.
	p := make([]byte, sb)
	d, ok := v.PlanRead(p, 0)
	if !ok {
		t.Fatal("degraded whole-stripe read not planned")
	}
	mm[4].SetFailed(true)
	SyncExecutor{}.Execute(d.IOs)
	if _, err := d.Finish(); err != nil || !bytes.Equal(p, data[:sb]) {
		t.Fatalf("read with a second member failing: err %v, equal %v", err, bytes.Equal(p, data[:sb]))
	}
	if r := v.Status().Members[4].Role; r != superblock.RoleFailed {
		t.Fatalf("member 4 is %s after its planned read failed", r)
	}
	// A writer holds stripe 0; the read touches member 1's chunk there.
	g := v.Geometry()
	pos := 0
	for g.MemberOf(0, pos) != 1 {
		pos++
	}
	if pos >= g.K {
		t.Fatalf("member 1 holds parity in row 0 (position %d): pick another row", pos)
	}
	lk := v.lockFor(0)
	lk.Lock()
	if d, ok := v.PlanRead(make([]byte, 4096), int64(pos*g.ChunkSize)); ok {
		d.Cancel()
		lk.Unlock()
		t.Fatal("a degraded read of a stripe held by a writer was planned")
	}
	lk.Unlock()
}

// filledVolume is a 4+2 volume (8 KiB chunks) written whole with random
// bytes (data).
func filledVolume(t *testing.T, name string, rng *rand.Rand) (*Volume, []*MemMember, []byte) {
	t.Helper()
	v, mm := newTestVolume(t, Config{Name: name, K: 4, M: 2, ChunkSize: 8192}, 1<<20)
	data := make([]byte, v.Size())
	for i := range data {
		data[i] = byte(rng.IntN(256))
	}
	if _, err := v.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	return v, mm, data
}
