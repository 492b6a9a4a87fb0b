package engine

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
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
// back reconstructed; a read across stripes touching the failed member's
// chunks is then planned degraded, in one batch.
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
	d, ok := v.PlanRead(p, 0)
	if !ok {
		t.Fatal("a degraded read of two stripes was not planned")
	}
	if want := 2 * v.Geometry().K; len(d.IOs) != want {
		t.Errorf("degraded read of two stripes: %d member reads in its batch, want %d", len(d.IOs), want)
	}
	clear(p)
	SyncExecutor{}.Execute(d.IOs)
	if _, err := d.Finish(); err != nil || !bytes.Equal(p, data[:len(p)]) {
		t.Fatalf("degraded read of two stripes: err %v, equal %v", err, bytes.Equal(p, data[:len(p)]))
	}
	if st := v.IOStats(); st.Read.Requests == 0 {
		t.Error("planned reads not counted in IOStats")
	}
}

// TestDirectReadDegraded: with a member failed, reads of up to
// maxDegradedStripes stripes are still planned, as one batch with each
// member's reads together in offset order: the readable chunks they need,
// the rest reconstructed by Finish, and they return what ReadAt returns.
// A second member failing under a planned degraded read is failed by
// Finish, and the read is redone from the survivors. A read over a stripe
// another request holds exclusively is not planned, and holds no lock.
func TestDirectReadDegraded(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	v, mm, data := filledVolume(t, "dd", rng)
	defer v.Close()
	if err := v.FailMember(1); err != nil {
		t.Fatal(err)
	}
	sb := v.Geometry().StripeBytes()
	for i := range 200 {
		stripes := int64(1)
		if i%2 == 1 { // spanning up to maxDegradedStripes stripes
			stripes = 1 + rng.Int64N(maxDegradedStripes)
		}
		n := (1 + rng.IntN(int(stripes*sb/4096)-int(stripes-1))) * 4096
		stripe := rng.Int64N(v.Size()/sb - stripes + 1)
		off := stripe*sb + rng.Int64N((stripes*sb-int64(n))/4096+1)*4096
		p := make([]byte, n)
		planned, err := runDirect(t, v, p, off)
		if !planned || err != nil || !bytes.Equal(p, data[off:off+int64(n)]) {
			t.Fatalf("degraded read %d at %d: planned %v, err %v, equal %v", n, off, planned, err, bytes.Equal(p, data[off:off+int64(n)]))
		}
	}
	// One batch per request, a member's chunks in offset order.
	p := make([]byte, maxDegradedStripes*sb)
	d, ok := v.PlanRead(p, sb)
	if !ok {
		t.Fatalf("degraded read of %d stripes not planned", maxDegradedStripes)
	}
	if want := maxDegradedStripes * v.Geometry().K; len(d.IOs) != want {
		t.Errorf("degraded read of %d whole stripes: %d member reads, want %d", maxDegradedStripes, len(d.IOs), want)
	}
	done := map[Member]bool{} // members whose run of reads ended
	for i := 1; i < len(d.IOs); i++ {
		a, b := d.IOs[i-1], d.IOs[i]
		if a.Dev != b.Dev {
			done[a.Dev] = true
		}
		if done[b.Dev] || a.Dev == b.Dev && a.Off >= b.Off {
			t.Fatalf("member read %d (at %d) not right after its member's previous one", i, b.Off)
		}
	}
	d.Cancel()
	if d, ok := v.PlanRead(make([]byte, (maxDegradedStripes+1)*sb), 0); ok {
		d.Cancel()
		t.Fatalf("degraded read of %d stripes planned", maxDegradedStripes+1)
	}
	// A writer holds one stripe of a multi-stripe degraded read: not
	// planned, and no other stripe's lock stays held.
	held := v.lockFor(2)
	held.Lock()
	if d, ok := v.PlanRead(make([]byte, 4*sb), 0); ok {
		d.Cancel()
		held.Unlock()
		t.Fatal("a degraded read over a stripe held by a writer was planned")
	}
	held.Unlock()
	for s := int64(0); s < maxDegradedStripes+1; s++ {
		if lk := v.lockFor(s); !lk.TryLock() {
			t.Fatalf("stripe %d's lock still held after an unplanned or cancelled read", s)
		} else {
			lk.Unlock()
		}
	}
	// Member 4 starts failing under a planned read of whole stripes.
	p = make([]byte, 3*sb)
	d, ok = v.PlanRead(p, 0)
	if !ok {
		t.Fatal("degraded whole-stripe read not planned")
	}
	mm[4].SetFailed(true)
	SyncExecutor{}.Execute(d.IOs)
	if _, err := d.Finish(); err != nil || !bytes.Equal(p, data[:3*sb]) {
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

// TestDirectReadDegradedWithWriters: planned degraded reads over several
// stripes, concurrent with writers, never return a block that no write
// produced: each stripe is reconstructed under its lock from chunks of one
// write. Every written block is its offset, a version and bytes drawn from
// both; a reconstruction from a data chunk and a parity of different
// writes returns no such block.
func TestDirectReadDegradedWithWriters(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	v, _, _ := filledVolume(t, "dw", rng)
	defer v.Close()
	sb := v.Geometry().StripeBytes()
	const stripes = 4 // few, so that reads and writes meet
	block := func(off int64, version uint64) []byte {
		b := make([]byte, 4096)
		binary.LittleEndian.PutUint64(b, uint64(off))
		binary.LittleEndian.PutUint64(b[8:], version)
		r := rand.New(rand.NewPCG(uint64(off), version)) // not linear: a mix of writes is no write
		for i := 16; i < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], r.Uint64())
		}
		return b
	}
	for s := int64(0); s < stripes; s++ { // every block written once
		for off := s * sb; off < (s+1)*sb; off += 4096 {
			if _, err := v.WriteAt(block(off, 0), off); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := v.FailMember(2); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for version := uint64(1); ; version++ {
				select {
				case <-stop:
					return
				default:
				}
				off := r.Int64N(stripes*sb/4096) * 4096
				if _, err := v.WriteAt(block(off, version), off); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	planned := 0
	for range 2000 {
		n := 1 + rng.Int64N(stripes)
		off := rng.Int64N(stripes-n+1) * sb
		p := make([]byte, n*sb)
		d, ok := v.PlanRead(p, off)
		if ok {
			for i := range d.IOs { // one by one, letting writers run between
				SyncExecutor{}.Execute(d.IOs[i : i+1])
				runtime.Gosched()
			}
			if _, err := d.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		if !ok {
			continue // a writer held a stripe: ReadAt's business
		}
		planned++
		for i := int64(0); i < int64(len(p)); i += 4096 {
			b := p[i : i+4096]
			if want := block(off+i, binary.LittleEndian.Uint64(b[8:])); !bytes.Equal(b, want) {
				close(stop)
				wg.Wait()
				t.Fatalf("block at %d of a planned degraded read is no write's", off+i)
			}
		}
	}
	close(stop)
	wg.Wait()
	if planned == 0 {
		t.Fatal("no degraded read was planned")
	}
	t.Logf("%d of 2000 degraded reads planned", planned)
}
