package engine

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// directWriter performs a DirectWrite's rounds the way a caller with its
// own ring would (here: each round's IOs one after another); between calls
// it runs between(round) so a test can change the world between rounds.
type directWriter struct {
	t       *testing.T
	between func(round int)
}

// write plans and runs a direct write. planned is false when PlanWrite
// declined; blocked reports that Step asked for Finish elsewhere.
func (w directWriter) write(v *Volume, p []byte, off int64) (planned, blocked bool, err error) {
	w.t.Helper()
	d, ok := v.PlanWrite(p, off)
	if !ok {
		return false, false, nil
	}
	for round := 0; ; round++ {
		if w.between != nil {
			w.between(round)
		}
		SyncExecutor{}.Execute(d.IOs)
		more, block := d.Step()
		if !more {
			blocked = block
			break
		}
	}
	_, err = d.Finish()
	return true, blocked, err
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

func checkVolume(t *testing.T, v *Volume, model []byte, what string) {
	t.Helper()
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatalf("%s: read back: %v", what, err)
	}
	if !bytes.Equal(got, model) {
		t.Fatalf("%s: volume differs from the model", what)
	}
}

func checkScrubClean(t *testing.T, v *Volume, what string) {
	t.Helper()
	rep, err := v.Scrub(context.Background(), false, RebuildOptions{})
	if err != nil || rep.Mismatches != 0 {
		t.Fatalf("%s: scrub: %+v, %v", what, rep, err)
	}
}

// TestDirectWrite: planned writes of every shape inside a stripe (4 KiB
// read-modify-writes, reconstruct-writes, full stripes) leave what WriteAt
// leaves, with consistent parity; writes across stripes, to a region whose
// write-intent bit is not durable, or to a locked stripe are not planned.
func TestDirectWrite(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "dw", K: 4, M: 2, ChunkSize: 8192}, 1<<20)
	defer v.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	model := make([]byte, v.Size())
	sb := v.Geometry().StripeBytes()
	// Before any write no bit is set: a planned write would need a
	// metadata write first, so none is planned.
	if d, ok := v.PlanWrite(make([]byte, 4096), 0); ok {
		d.Finish()
		t.Fatal("a write to a region whose bit is not set was planned")
	}
	model = randomBytes(rng, int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	w := directWriter{t: t}
	planned := 0
	for i := range 200 {
		stripe := rng.Int64N(v.Size() / sb)
		n := (1 + rng.IntN(int(sb/4096))) * 4096
		if i%10 == 0 {
			n = int(sb)
		}
		off := stripe*sb + rng.Int64N((sb-int64(n))/4096+1)*4096
		p := randomBytes(rng, n)
		ok, _, err := w.write(v, p, off)
		if err != nil {
			t.Fatalf("planned write %d at %d: %v", n, off, err)
		}
		if !ok {
			t.Fatalf("write %d at %d inside one stripe of a healthy volume not planned", n, off)
		}
		planned++
		copy(model[off:], p)
	}
	checkVolume(t, v, model, "after planned writes")
	checkScrubClean(t, v, "after planned writes")
	if d, ok := v.PlanWrite(make([]byte, 8192), sb-4096); ok {
		d.Finish()
		t.Fatal("a write across two stripes was planned")
	}
	// A planned write holds its stripe lock until Finish.
	d, ok := v.PlanWrite(make([]byte, 4096), 0)
	if !ok {
		t.Fatal("not planned")
	}
	if d2, ok := v.PlanWrite(make([]byte, 4096), 4096); ok {
		d2.Finish()
		t.Fatal("a write to a stripe another planned write holds was planned")
	}
	SyncExecutor{}.Execute(d.IOs)
	for more, _ := d.Step(); more; more, _ = d.Step() {
		SyncExecutor{}.Execute(d.IOs)
	}
	if _, err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	clear(model[:4096])
	checkVolume(t, v, model, "after the locked-stripe check")
	if st := v.IOStats(); st.Write.Requests < uint64(planned) {
		t.Errorf("%d writes counted in IOStats, want at least the %d planned", st.Write.Requests, planned)
	}
	want := PlanStats{Planned: uint64(planned) + 1, NotOneStripe: 1, BitNotDurable: 1, StripeBusy: 1}
	if got := v.IOStats().PlannedWrites; got != want {
		t.Errorf("IOStats().PlannedWrites = %+v, want %+v", got, want)
	}
}

// TestDirectWriteMemberFails: a member failing in either round of a
// planned write is failed before the write returns, the write still
// succeeds (re-planned after a failed read, degraded after a failed
// write), Step says Finish may block, and the data reads back from the
// survivors; later writes to the degraded stripe are planned degraded.
func TestDirectWriteMemberFails(t *testing.T) {
	for _, failRound := range []int{0, 1} {
		v, mm := newTestVolume(t, Config{Name: "dwf", K: 4, M: 2, ChunkSize: 8192}, 1<<20)
		rng := rand.New(rand.NewPCG(7, uint64(failRound)))
		model := randomBytes(rng, int(v.Size()))
		if _, err := v.WriteAt(model, 0); err != nil {
			t.Fatal(err)
		}
		g := v.Geometry()
		// Fail the member holding the parity of row 0 (read and written
		// by a 4 KiB read-modify-write of the row's first chunk).
		victim := g.MemberOf(0, g.K)
		w := directWriter{t: t, between: func(round int) {
			if round == failRound {
				mm[victim].SetFailed(true)
			}
		}}
		p := randomBytes(rng, 4096)
		planned, blocked, err := w.write(v, p, 0)
		if !planned || !blocked || err != nil {
			t.Fatalf("fail in round %d: planned %v, blocked %v, err %v; want planned, blocked, no error", failRound, planned, blocked, err)
		}
		copy(model, p)
		if r := v.Status().Members[victim].Role; r != superblock.RoleFailed {
			t.Fatalf("fail in round %d: member %d is %s after the write returned", failRound, victim, r)
		}
		checkVolume(t, v, model, "degraded")
		// The degraded stripe's writes are planned too (degraded plan,
		// stripe journal record first).
		p = randomBytes(rng, 4096)
		planned, _, err = w.write(v, p, 0)
		if !planned || err != nil {
			t.Fatalf("fail in round %d: degraded write: planned %v, err %v", failRound, planned, err)
		}
		copy(model, p)
		checkVolume(t, v, model, "degraded, planned")
		v.Close()
	}
}

// TestDirectWriteFreezeBetweenRounds: a volume frozen between the read and
// the write round keeps the writes from reaching any member until it is
// thawed; Step says Finish blocks, and Finish completes after Thaw.
func TestDirectWriteFreezeBetweenRounds(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "dwz", K: 4, M: 2, ChunkSize: 8192}, 1<<20)
	defer v.Close()
	model := randomBytes(rand.New(rand.NewPCG(9, 9)), int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	p := bytes.Repeat([]byte{0xd7}, 4096)
	d, ok := v.PlanWrite(p, 0)
	if !ok {
		t.Fatal("not planned")
	}
	SyncExecutor{}.Execute(d.IOs)
	frozen := make(chan struct{})
	go func() { v.Freeze(); close(frozen) }()
	for !v.gate.frozen() {
		time.Sleep(time.Millisecond) // Freeze shut the gate; it waits for the reads' round
	}
	snap := func() (s [][]byte) {
		for _, m := range mm {
			s = append(s, snapshotMember(t, m))
		}
		return s
	}
	before := snap()
	more, block := d.Step()
	if more || !block {
		t.Fatalf("Step on a frozen volume: more %v, block %v; want the writes held", more, block)
	}
	<-frozen
	done := make(chan error)
	go func() { _, err := d.Finish(); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("Finish returned on a frozen volume: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	for i, b := range snap() {
		if !bytes.Equal(b, before[i]) {
			t.Fatalf("member %d written while frozen", i)
		}
	}
	if err := v.Thaw(v.Status().Epoch + 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	copy(model, p)
	checkVolume(t, v, model, "after thaw")
	checkScrubClean(t, v, "after thaw")
}

// TestDirectWriteConcurrent: planned and general writes of 4 KiB blocks
// that share stripes, from several goroutines at once, leave every block
// as its last writer left it and parity consistent. A planned write that
// finds its stripe locked is not planned (the caller falls back to
// WriteAt), so both paths meet on the same stripes.
func TestDirectWriteConcurrent(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "dwc", K: 4, M: 2, ChunkSize: 4096}, 512<<10)
	defer v.Close()
	size := int(v.Size())
	model := randomBytes(rand.New(rand.NewPCG(11, 0)), size)
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	const writers = 4
	blocks := size / 4096
	var planned [writers]int
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			rng := rand.New(rand.NewPCG(12, uint64(w)))
			// Pauses between rounds let other writers reach the stripe.
			dw := directWriter{t: t, between: func(int) { time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond) }}
			for range 400 {
				// Writer w owns blocks w, w+writers, ...: its blocks share
				// stripes with every other writer's.
				blk := (rng.IntN(blocks/writers))*writers + w
				p := randomBytes(rng, 4096)
				off := int64(blk) * 4096
				ok, _, err := dw.write(v, p, off)
				if !ok && err == nil {
					_, err = v.WriteAt(p, off)
				}
				if err != nil {
					errs <- err
					return
				}
				if ok {
					planned[w]++
				}
				copy(model[off:], p) // only writer w touches these bytes
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkVolume(t, v, model, "after concurrent writes")
	checkScrubClean(t, v, "after concurrent writes")
	t.Logf("planned writes per writer: %v of 400", planned)
}

// TestJournalCrashOwnerDomainDirect is TestJournalCrashOwnerDomain with
// owner-domain journaling on and the writers' writes planned (the ublk
// queue thread's path): the power is cut between any two member I/Os of
// the planned rounds (reads, journal record, writes) and the owner's
// members are lost with it. No run may read back wrong data.
func TestJournalCrashOwnerDomainDirect(t *testing.T) {
	directCrashRuns(t, 13, crashCase{owner: true, ownerJournal: true})
}

// TestDirectWriteFinishDoesNotWait: once Step reported that Finish does not
// block, Finish returns even while a member failure is being recorded
// (metaMu held, the failure not yet recorded): the ublk queue thread calls
// it inline, and waiting there would stall every request on its queue.
func TestDirectWriteFinishDoesNotWait(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "dwn", K: 4, M: 2, ChunkSize: 8192}, 1<<20)
	defer v.Close()
	if _, err := v.WriteAt(make([]byte, v.Geometry().StripeBytes()), 0); err != nil {
		t.Fatal(err)
	}
	d, ok := v.PlanWrite(make([]byte, 4096), 0)
	if !ok {
		t.Fatal("not planned")
	}
	more, block := true, false
	for more {
		SyncExecutor{}.Execute(d.IOs)
		more, block = d.Step()
	}
	if block {
		t.Fatal("Step says Finish blocks on a healthy volume")
	}
	// A recorder of a member failure that came after the writes.
	v.metaMu.Lock()
	v.failGen.Add(1)
	done := make(chan error, 1)
	go func() { _, err := d.Finish(); done <- err }()
	var err error
	waited := false
	select {
	case err = <-done:
	case <-time.After(2 * time.Second):
		waited = true
	}
	v.failGen.Add(-1)
	v.metaMu.Unlock()
	if waited {
		<-done
		t.Fatal("Finish waited for a failure recorded after the write's member I/O")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestIdleClean: with Options.IdleClean a volume that stops being written
// cleans its write-intent bitmap by itself, on disk too, without a
// consumer flush; a later write sets its bit again, and it clears again.
func TestIdleClean(t *testing.T) {
	g := layout.Geometry{K: 4, M: 2, Groups: 1}
	_, devs := memMembers(g.Members(), 1<<20)
	v, err := Create(Config{Name: "idle", K: 4, M: 2, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: 256 << 10}, devs, nil,
		Options{Logger: quietLogger(), IdleClean: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	awaitClean := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); v.bm.anySet(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: write-intent bits still set 20 s after the last write", what)
			}
		}
	}
	for round := range 2 {
		if _, err := v.WriteAt(bytes.Repeat([]byte{byte(round + 1)}, 8192), int64(round)*(128<<10)); err != nil {
			t.Fatal(err)
		}
		if !v.bm.anySet() {
			t.Fatalf("round %d: no bit set after a write", round)
		}
		awaitClean(fmt.Sprintf("round %d", round))
		// On disk too: what an assembly would read.
		for slot, d := range devs {
			if dirty := readBitmap(t, v, d); dirty.any() {
				t.Fatalf("round %d: member %d's bitmap still has dirty regions", round, slot)
			}
		}
	}
	if st := v.IOStats(); st.Flush.Requests != 0 {
		t.Errorf("%d flushes counted as the consumer's", st.Flush.Requests)
	}
}

// readBitmap reads the write-intent bitmap on member d.
func readBitmap(t *testing.T, v *Volume, d Member) bitset {
	t.Helper()
	buf := make([]byte, v.base.BitmapBytes)
	if _, err := d.ReadAt(buf, v.base.BitmapOffset); err != nil {
		t.Fatal(err)
	}
	return decodeBitset(buf, v.bm.n)
}

// TestJournalCrashDirect is TestJournalCrash with the writers' writes
// planned: degraded volumes (members lost, replaced, returning, being
// rebuilt), the stripe journal on, the power cut between any two member
// I/Os of the planned rounds. No run may read back wrong data.
func TestJournalCrashDirect(t *testing.T) {
	directCrashRuns(t, 17, crashCase{})
}

// directCrashRuns runs crashRun's power-cut schedules for c with the
// writers' writes planned (stream selects the seeded schedule): no run may
// read back wrong data, and some writes must have been planned.
func directCrashRuns(t *testing.T, stream uint64, c crashCase) {
	t.Helper()
	seed := testSeed(t)
	iters := 40
	if *longRun {
		iters = 400
	}
	if testing.Short() {
		iters = 10
	}
	rng := rand.New(rand.NewPCG(seed, stream))
	var planned atomic.Int64
	c.direct, c.planned = true, &planned
	cuts := 0
	for i := 0; i < iters; i++ {
		bad, desc := crashRun(t, rng, c)
		if bad > 0 {
			t.Fatalf("iteration %d: %s: %d blocks read back neither their flushed value nor a value written since", i, desc, bad)
		}
		if strings.Contains(desc, "power cut") {
			cuts++
		}
	}
	t.Logf("%d runs, %d with the power cut in the middle of the writes; %d writes planned", iters, cuts, planned.Load())
	if planned.Load() == 0 {
		t.Fatal("no write was planned: the test does not reach the planned path")
	}
}

// earlyJournalVolume is a 4+2 owner-domain-journaled volume, members 0 and
// 1 in the owner's domain, filled with random data (returned as model).
func earlyJournalVolume(t *testing.T, rng *rand.Rand) (*Volume, []*MemMember, []byte) {
	t.Helper()
	g := layout.Geometry{K: 4, M: 2, Groups: 1}
	cfg := Config{Name: "early", K: 4, M: 2, ChunkSize: 8192, RegionSize: 64 << 10, DataOffset: 256 << 10,
		Domains: []string{ownerDomain, ownerDomain, "n2", "n3", "n4", "n5"}}
	mm, devs := memMembers(g.Members(), 1<<20)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger(), OwnerDomain: ownerDomain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	model := randomBytes(rng, int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	return v, mm, model
}

// roundKind names a planned write's round by what it holds.
func roundKind(ios []IO) string {
	reads, fua, writes := 0, 0, 0
	for _, io := range ios {
		switch {
		case !io.Write:
			reads++
		case io.FUA:
			fua++
		default:
			writes++
		}
	}
	switch {
	case reads > 0 && fua > 0 && writes == 0:
		return "reads+record"
	case reads > 0 && fua+writes == 0:
		return "reads"
	case fua > 0 && reads+writes == 0:
		return "record"
	case writes > 0 && reads+fua == 0:
		return "writes"
	}
	return fmt.Sprintf("%d reads, %d FUA writes, %d writes", reads, fua, writes)
}

// TestDirectWriteJournalWithReads: on an owner-domain-journaled volume a
// planned write that writes every journaled chunk whole over its range
// writes the record in the read round (reads with the FUA record, then the
// writes); one whose record needs bytes it does not write journals after
// the reads.
func TestDirectWriteJournalWithReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	v, _, model := earlyJournalVolume(t, rng)
	sb := v.Geometry().StripeBytes()
	for _, tc := range []struct {
		what   string
		off    int64
		n      int
		rounds []string
	}{
		// Row 1: member 1 (owner) holds data position 0, member 0
		// (owner) parity: the record is position 0 alone.
		{"row 1, 4 KiB of the owner's only data chunk", sb + 4096, 4096, []string{"reads+record", "writes"}},
		// Row 0: members 0 and 1 hold data positions 0 and 1: the
		// record needs position 1's bytes, read first.
		{"row 0, 4 KiB of one of the owner's two data chunks", 4096, 4096, []string{"reads", "record", "writes"}},
		// Row 1 again, two chunks at different ranges: position 0's
		// record range is not all written.
		{"row 1, the end of chunk 0 and the start of chunk 1", sb + 4096, 8192, []string{"reads", "record", "writes"}},
	} {
		p := randomBytes(rng, tc.n)
		d, ok := v.PlanWrite(p, tc.off)
		if !ok {
			t.Fatalf("%s: not planned", tc.what)
		}
		var rounds []string
		for more := true; more; {
			rounds = append(rounds, roundKind(d.IOs))
			SyncExecutor{}.Execute(d.IOs)
			more, _ = d.Step()
		}
		if _, err := d.Finish(); err != nil {
			t.Fatal(err)
		}
		copy(model[tc.off:], p)
		if !slices.Equal(rounds, tc.rounds) {
			t.Errorf("%s: rounds %v, want %v", tc.what, rounds, tc.rounds)
		}
	}
	checkVolume(t, v, model, "after the planned writes")
	checkScrubClean(t, v, "after the planned writes")
}

// TestDirectWriteJournalWithReadsFails: a member failing in the round that
// carries the reads and the record (the record's member, or a read's) is
// failed before the write returns, the write succeeds on the general path
// and reads back, and parity stays consistent.
func TestDirectWriteJournalWithReadsFails(t *testing.T) {
	for _, victim := range []string{"record", "read", "reconstruct read"} {
		rng := rand.New(rand.NewPCG(13, uint64(len(victim))))
		v, mm, model := earlyJournalVolume(t, rng)
		// Row 1 (see TestDirectWriteJournalWithReads): a 4 KiB
		// read-modify-write of position 0, or a reconstruct-write of
		// positions 0-2 that reads position 3, which it does not write.
		off, n := v.Geometry().StripeBytes()+4096, 4096
		if victim == "reconstruct read" {
			off, n = v.Geometry().StripeBytes(), 3*8192
		}
		p := randomBytes(rng, n)
		d, ok := v.PlanWrite(p, off)
		if !ok || roundKind(d.IOs) != "reads+record" {
			t.Fatalf("%s: planned %v, first round %s", victim, ok, roundKind(d.IOs))
		}
		slot := -1
		for _, io := range d.IOs {
			if io.FUA == (victim == "record") && io.Write == (victim == "record") {
				for i, m := range mm {
					if Member(m) == io.Dev {
						slot = i
					}
				}
				break
			}
		}
		mm[slot].SetFailed(true)
		SyncExecutor{}.Execute(d.IOs)
		if more, block := d.Step(); more || !block {
			t.Fatalf("%s: after a failed round Step = more %v, block %v; want Finish, blocking", victim, more, block)
		}
		if _, err := d.Finish(); err != nil {
			t.Fatalf("%s: %v", victim, err)
		}
		copy(model[off:], p)
		if r := v.Status().Members[slot].Role; r != superblock.RoleFailed {
			t.Fatalf("%s: member %d is %s after the write returned", victim, slot, r)
		}
		v.jrn.mu.Lock()
		inflight := len(v.jrn.inflight)
		v.jrn.mu.Unlock()
		if inflight != 0 {
			t.Fatalf("%s: %d journal records still in flight after the write returned", victim, inflight)
		}
		checkVolume(t, v, model, victim+" failed")
	}
}
