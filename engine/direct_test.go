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
// back reconstructed; a read touching an unreadable chunk is not planned.
func TestDirectRead(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "d", K: 4, M: 2, ChunkSize: 8192}, 1<<20)
	defer v.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, v.Size())
	for i := range data {
		data[i] = byte(rng.IntN(256))
	}
	if _, err := v.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
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
