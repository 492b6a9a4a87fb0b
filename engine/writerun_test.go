package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// batchRecorder is an Executor that records the batches it runs, each IO
// as its member's index in devs, and runs them one after another.
type batchRecorder struct {
	devs    []Member
	armed   atomic.Bool
	mu      sync.Mutex
	batches [][]recordedIO
}

type recordedIO struct {
	slot       int
	write, fua bool
	off        int64
	n          int
}

func (b *batchRecorder) Execute(ios []IO) {
	if b.armed.Load() {
		var batch []recordedIO
		for _, io := range ios {
			slot := -1
			for i, d := range b.devs {
				if d == io.Dev {
					slot = i
				}
			}
			batch = append(batch, recordedIO{slot: slot, write: io.Write, fua: io.FUA, off: io.Off, n: len(io.Buf)})
		}
		b.mu.Lock()
		b.batches = append(b.batches, batch)
		b.mu.Unlock()
	}
	SyncExecutor{}.Execute(ios)
}

// A write over several whole stripes runs in shared rounds: every journal
// record in one batch (with owner-domain journaling: one FUA write, the
// records adjacent on one member), then every data and
// parity write in one batch in which each member's chunks follow each
// other at adjacent offsets, so that the block layer merges them into one
// member I/O. The data reads back.
func TestWriteStripesRounds(t *testing.T) {
	for _, owner := range []bool{false, true} {
		t.Run(fmt.Sprintf("owner-journal=%v", owner), func(t *testing.T) {
			const stripes = 4
			cfg := Config{Name: "rounds", K: 3, M: 2, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: 256 << 10, AssumeZeroed: true,
				Domains: []string{ownerDomain, "n1", "n2", "n3", "n4"}}
			_, devs := memMembers(5, 1<<20)
			rec := &batchRecorder{devs: devs}
			opts := Options{Logger: quietLogger(), Executor: rec}
			if owner {
				opts.OwnerDomain = ownerDomain
			}
			v, err := Create(cfg, devs, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			stripeBytes := v.Geometry().StripeBytes()
			p := make([]byte, stripes*stripeBytes)
			rng := rand.New(rand.NewPCG(5, 6))
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			if _, err := v.WriteAt(p, 0); err != nil { // sets the region's bit
				t.Fatal(err)
			}
			for i := range p {
				p[i]++
			}
			rec.armed.Store(true)
			if _, err := v.WriteAt(p, 0); err != nil {
				t.Fatal(err)
			}
			rec.armed.Store(false)
			var records, writes [][]recordedIO
			for _, b := range rec.batches {
				switch {
				case b[0].fua:
					records = append(records, b)
				case b[0].write:
					writes = append(writes, b)
				default:
					t.Fatalf("a full-stripe write read: %+v", b)
				}
			}
			if want := 0; owner {
				want = 1
				if len(records) != want {
					t.Fatalf("journal records in %d batches, want %d: %+v", len(records), want, rec.batches)
				}
				// The run's records lie back to back on one member: one
				// FUA write carries them all.
				if len(records[0]) != 1 {
					t.Fatalf("journal records in %d writes, want one: %+v", len(records[0]), records[0])
				}
				if n := records[0][0].n; n <= int(maxRecordSize(v.geo)) {
					t.Fatalf("one record write of %d bytes: want several records in it", n)
				}
			} else if len(records) != 0 {
				t.Fatalf("records without owner-domain journaling: %+v", records)
			}
			if len(writes) != 1 || len(writes[0]) != stripes*5 {
				t.Fatalf("data and parity writes in %d batches (%+v), want one of %d", len(writes), writes, stripes*5)
			}
			checkMemberRuns(t, writes[0], stripes)
			got := make([]byte, len(p))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, p) {
				t.Fatalf("read back: %v, equal %v", err, bytes.Equal(got, p))
			}
		})
	}
}

// checkMemberRuns checks that batch holds, for each member, perChunk
// consecutive chunk writes at adjacent ascending offsets.
func checkMemberRuns(t *testing.T, batch []recordedIO, perMember int) {
	t.Helper()
	seen := map[int]bool{}
	for i := 0; i < len(batch); {
		slot := batch[i].slot
		if seen[slot] {
			t.Fatalf("member %d's writes are not consecutive in the batch: %+v", slot, batch)
		}
		seen[slot] = true
		n := 1
		for ; i+n < len(batch) && batch[i+n].slot == slot; n++ {
			prev := batch[i+n-1]
			if batch[i+n].off != prev.off+int64(prev.n) {
				t.Fatalf("member %d: write at %d does not follow the one at %d+%d", slot, batch[i+n].off, prev.off, prev.n)
			}
		}
		if n != perMember {
			t.Fatalf("member %d: %d writes in a run, want %d", slot, n, perMember)
		}
		i += n
	}
}

// A write over several stripes whose reconstruct-write read fails on a
// member fails that member, re-plans the stripe concerned on its own and
// lands: the data reads back, the failed member's chunks reconstructed
// from the parity the write computed.
func TestWriteStripesReadFailure(t *testing.T) {
	var failSlot atomic.Int32
	failSlot.Store(-1)
	_, devs := hookMembers(6, 2<<20, func(op memOp) error {
		if op.slot == int(failSlot.Load()) && !op.write && !op.flush && !op.after {
			return errors.New("injected read error")
		}
		return nil
	})
	v, err := Create(Config{Name: "rf", K: 4, M: 2, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: 256 << 10, AssumeZeroed: true},
		devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	g := v.Geometry()
	model := make([]byte, 8*g.StripeBytes())
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range model {
		model[i] = byte(rng.Uint32())
	}
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	// Stripe 0 from its second block on: a reconstruct-write that reads
	// data position 0, on the member that fails.
	slot := g.Slot(0, g.MemberOf(0, 0))
	failSlot.Store(int32(slot))
	off := int64(layout.BlockSize)
	p := bytes.Repeat([]byte{7}, int(3*g.StripeBytes()-layout.BlockSize))
	if _, err := v.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	copy(model[off:], p)
	if m := v.Status().Members[slot]; m.Role != superblock.RoleFailed {
		t.Fatalf("member %d after its read failed: %+v", slot, m)
	}
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read back: %v, equal %v", err, bytes.Equal(got, model))
	}
}

// A healthy read over several stripes is one batch of direct reads in
// which each member's chunks follow each other in ascending offsets, so
// that the block layer merges the adjacent ones (PlanRead's too).
func TestReadStripesSorted(t *testing.T) {
	cfg := Config{Name: "reads", K: 4, M: 2, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: 256 << 10, AssumeZeroed: true}
	_, devs := memMembers(6, 1<<20)
	rec := &batchRecorder{devs: devs}
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger(), Executor: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	p := make([]byte, 6*v.Geometry().StripeBytes())
	for i := range p {
		p[i] = byte(i / 4096)
	}
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(p)-layout.BlockSize)
	rec.armed.Store(true)
	if _, err := v.ReadAt(got, layout.BlockSize); err != nil {
		t.Fatal(err)
	}
	d, ok := v.PlanRead(got, layout.BlockSize)
	if !ok {
		t.Fatal("healthy read not planned")
	}
	rec.Execute(d.IOs)
	if _, err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	rec.armed.Store(false)
	if len(rec.batches) != 2 {
		t.Fatalf("%d batches, want 2", len(rec.batches))
	}
	for _, b := range rec.batches {
		checkMemberOrder(t, b)
	}
	if !bytes.Equal(got, p[layout.BlockSize:]) {
		t.Fatal("read back differs")
	}
}

// checkMemberOrder checks that each member's IOs in batch are consecutive
// and in ascending offsets.
func checkMemberOrder(t *testing.T, batch []recordedIO) {
	t.Helper()
	last := map[int]int{}
	for i, io := range batch {
		if j, seen := last[io.slot]; seen && (j != i-1 || batch[j].off >= io.off) {
			t.Fatalf("member %d: IO %d (at %d) does not follow its IO %d (at %d) in order: %+v", io.slot, i, io.off, j, batch[j].off, batch)
		}
		last[io.slot] = i
	}
}

// A write run whose shared journal write fails (one FUA write carrying the
// records of several stripes) fails that member, and every stripe of the
// run is written on its own with a record on another member: the write
// lands, the data reads back, and only the one member is failed.
func TestWriteStripesRecordFailure(t *testing.T) {
	var armed atomic.Bool
	failed := -1
	_, devs := hookMembers(5, 1<<20, func(op memOp) error {
		if armed.Load() && op.fua && !op.after && op.off >= 4096*3 && op.off < 256<<10 && op.n > 8192 {
			armed.Store(false)
			failed = op.slot
			return errors.New("injected journal write error")
		}
		return nil
	})
	cfg := Config{Name: "jf", K: 3, M: 2, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: 256 << 10, AssumeZeroed: true,
		Domains: []string{ownerDomain, "n1", "n2", "n3", "n4"}}
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger(), OwnerDomain: ownerDomain})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	model := make([]byte, 6*v.Geometry().StripeBytes())
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range model {
		model[i] = byte(rng.Uint32())
	}
	armed.Store(true)
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if failed < 0 {
		t.Fatal("no journal write of several records was seen")
	}
	for slot, m := range v.Status().Members {
		if want := slot == failed; (m.Role == superblock.RoleFailed) != want {
			t.Fatalf("member %d after the journal write on member %d failed: %+v", slot, failed, m)
		}
	}
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read back: %v, equal %v", err, bytes.Equal(got, model))
	}
}
