package engine

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// integrityCfg is a 2+1 volume with one 4 KiB block per chunk and one row
// per region, so that every row has its own write-intent bit.
func integrityCfg() Config {
	return Config{Name: "integ", K: 2, M: 1, ChunkSize: layout.BlockSize, RegionSize: layout.BlockSize,
		DataOffset: 256 << 10, AssumeZeroed: true}
}

const integritySize = 256<<10 + 16*layout.BlockSize

// blockOn returns the volume offset of the data block of row held by slot
// (which must hold a data chunk of that row in group 0).
func blockOn(t *testing.T, g layout.Geometry, row int64, slot int) int64 {
	t.Helper()
	pos := g.PosOf(row, slot%g.Width())
	if pos >= g.K {
		t.Fatalf("slot %d holds parity of row %d", slot, row)
	}
	return (row*int64(g.K) + int64(pos)) * int64(g.ChunkSize)
}

// rowWithData returns the first row >= from in which slot holds a data
// chunk.
func rowWithData(g layout.Geometry, from int64, slot int) int64 {
	for row := from; ; row++ {
		if g.PosOf(row, slot%g.Width()) < g.K {
			return row
		}
	}
}

// A write that runs while ReAdd installs the returning member must reach it
// or be in its resync set: ReAdd took the bitmap snapshot (the resync set)
// before the slot became writable, so a write whose bit was first set after
// the snapshot, planned while the slot was still failed, skipped the member,
// and reads then trusted its stale chunk.
func TestReAddConcurrentWriteNotLost(t *testing.T) {
	const slot = 2
	var armed atomic.Bool
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var dataOff int64
	hook := func(op memOp) error {
		// Hold ReAdd at its first write to the returning member (the
		// bitmap copy, under metaMu).
		if armed.Load() && op.slot == slot && op.write && !op.after && op.off < dataOff {
			once.Do(func() { close(reached); <-release })
		}
		return nil
	}
	hm, devs := hookMembers(3, integritySize, hook)
	cfg := integrityCfg()
	dataOff = cfg.DataOffset
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	g := v.Geometry()
	row := rowWithData(g, 3, slot)
	off := blockOn(t, g, row, slot)
	if err := v.FailMember(slot); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	readd := make(chan error)
	go func() { readd <- v.ReAdd(hm[slot], "returned") }()
	<-reached
	p := bytes.Repeat([]byte{0x77}, layout.BlockSize)
	if _, err := v.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-readd; err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		got := make([]byte, layout.BlockSize)
		if _, err := v.ReadAt(got, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, p) {
			t.Fatalf("%s: acknowledged write of 0x77 at %d (row %d, slot %d) reads back 0x%02x", what, off, row, slot, got[0])
		}
	}
	check("after re-add")
	if err := v.Rebuild(t.Context(), RebuildOptions{YieldDelay: -1}); err != nil {
		t.Fatal(err)
	}
	check("after rebuild")
}

// A write-intent bit must not be cleared while a write to its region is not
// yet flushed. Write W began before flush N-1, which forgot it (its touched
// flag), and completed after flush N had flushed the members but before it
// cleared the idle bits: the cleared bitmap block then sat in the same
// unflushed member cache as W's writes. A power cut that keeps the bitmap
// block and W's data but drops W's parity leaves no resync at assembly,
// and the loss of the other data member then reconstructs a block nobody
// wrote since it was flushed wrongly.
func TestBitmapNotClearedUnderUnflushedWrite(t *testing.T) {
	cfg := integrityCfg()
	g := layout.Geometry{K: 2, M: 1, Groups: 1, ChunkSize: cfg.ChunkSize, Rows: 1}
	const row = 1
	d0, d1, par := g.Slot(0, g.MemberOf(row, 0)), g.Slot(0, g.MemberOf(row, 1)), g.Slot(0, g.MemberOf(row, 2))
	const (
		idle = iota
		holdW
		flushN
		inClear
	)
	var phase atomic.Int32
	var cut atomic.Bool
	wReached, wRelease, wDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	var hm []*hookMember
	hook := func(op memOp) error {
		if cut.Load() {
			return errPowerCut
		}
		switch phase.Load() {
		case holdW:
			// W's first member write waits.
			if op.write && !op.after && op.off >= cfg.DataOffset {
				holdOnce.Do(func() { close(wReached); <-wRelease })
			}
		case flushN:
			// Flush N flushed the last member: W completes now.
			if op.flush && op.after && op.slot == len(hm)-1 {
				phase.Store(inClear)
				close(wRelease)
				<-wDone
			}
		case inClear:
			// Flush N wrote a cleaned bitmap block and is about to
			// flush it: the power fails.
			if op.flush && !op.after {
				cut.Store(true)
				return errPowerCut
			}
		}
		return nil
	}
	hm, devs := hookMembers(3, integritySize, hook)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	off0, off1 := blockOn(t, g, row, d0), blockOn(t, g, row, d1)
	old1 := bytes.Repeat([]byte{0x11}, layout.BlockSize)
	stripe := append(bytes.Repeat([]byte{0x22}, layout.BlockSize), old1...)
	if off1 < off0 {
		stripe = append(old1, stripe[:layout.BlockSize]...)
	}
	if _, err := v.WriteAt(stripe, min(off0, off1)); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	phase.Store(holdW)
	go func() {
		defer close(wDone)
		if _, err := v.WriteAt(bytes.Repeat([]byte{0x77}, layout.BlockSize), off0); err != nil {
			t.Error(err)
		}
	}()
	<-wReached
	if err := v.Flush(); err != nil { // N-1
		t.Fatal(err)
	}
	phase.Store(flushN)
	_ = v.Flush() // N: fails if the power was cut in it
	<-wDone
	cut.Store(true)
	v.Abandon()
	for slot, h := range hm {
		h.crash(func(off int64) bool { return slot != par || off < cfg.DataOffset })
	}
	v, err = Assemble([]Member{hm[0].MemMember, hm[1].MemMember, hm[2].MemMember}, nil,
		Options{Logger: quietLogger(), SyncResync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.FailMember(d1); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, layout.BlockSize)
	if _, err := v.ReadAt(got, off1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, old1) {
		t.Fatalf("block %d, flushed as 0x11 and never rewritten, reads back 0x%02x after a power cut and the loss of its member",
			off1/layout.BlockSize, got[0])
	}
}

// fenceByNewOwner writes, on every member, superblocks of a newer owner
// epoch (another node assembled the volume).
func fenceByNewOwner(t *testing.T, devs []*hookMember) {
	t.Helper()
	for _, d := range devs {
		sb, err := superblock.ReadCopies(d.MemMember)
		if err != nil {
			t.Fatal(err)
		}
		sb.Epoch++
		sb.Events++
		b, err := sb.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		for _, off := range []int64{superblock.CopyAOffset, superblock.CopyBOffset} {
			if _, err := d.MemMember.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A request that saw a member fail is acknowledged only when the failure
// is recorded on the survivors' superblocks: here the metadata write finds
// the volume fenced by a newer owner, so the write (or the FUA write's
// flush) must fail instead of being acknowledged as if the failure had
// been recorded.
func TestMemberFailureUnrecordedFailsRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func(op memOp) bool // the member I/O that fails
		write func(v *Volume, p []byte, off int64) error
	}{
		{"write", func(op memOp) bool { return op.write && op.off >= 256<<10 },
			func(v *Volume, p []byte, off int64) error { _, err := v.WriteAt(p, off); return err }},
		{"fua-flush", func(op memOp) bool { return op.flush },
			func(v *Volume, p []byte, off int64) error { _, err := v.WriteAtFUA(p, off); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const slot = 1
			var armed atomic.Bool
			hm, devs := hookMembers(3, integritySize, func(op memOp) error {
				if armed.Load() && op.slot == slot && !op.after && tc.fail(op) {
					return ErrMemberIO
				}
				return nil
			})
			v, err := Create(integrityCfg(), devs, nil, Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Abandon()
			g := v.Geometry()
			row := rowWithData(g, 0, slot)
			off := blockOn(t, g, row, slot)
			p := bytes.Repeat([]byte{0x77}, layout.BlockSize)
			if _, err := v.WriteAt(p, off); err != nil { // the region's bit is set
				t.Fatal(err)
			}
			fenceByNewOwner(t, hm)
			armed.Store(true)
			err = tc.write(v, p, off)
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("request that failed slot %d while fenced returned %v, want ErrFenced", slot, err)
			}
		})
	}
}

// A retire requested (by a member failure) while another retire is between
// its last round and releasing its lock must still happen: retireSoon
// found the lock held and relied on the holder, which had already decided
// it was done, so records of writes that completed before the request
// stayed unretired.
func TestRetireSoonNotDropped(t *testing.T) {
	const failed = 2
	var armed atomic.Bool
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cfg := integrityCfg()
	_, devs := hookMembers(3, integritySize, func(op memOp) error {
		// Hold the journaled write's first data write: its record is
		// written and in flight.
		if armed.Load() && op.write && !op.after && op.off >= cfg.DataOffset {
			once.Do(func() { close(reached); <-release })
		}
		return nil
	})
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.FailMember(failed); err != nil {
		t.Fatal(err)
	}
	g := v.Geometry()
	row := rowWithData(g, 0, failed)
	other := g.Slot(0, g.MemberOf(row, 1-g.PosOf(row, failed)))
	off := blockOn(t, g, row, other)
	armed.Store(true)
	wDone := make(chan struct{})
	go func() {
		defer close(wDone)
		if _, err := v.WriteAt(bytes.Repeat([]byte{0x77}, layout.BlockSize), off); err != nil {
			t.Error(err)
		}
	}()
	<-reached
	j := v.jrn
	j.mu.Lock()
	seq := j.next - 1
	j.mu.Unlock()
	var roundOnce sync.Once
	j.afterRound = func() {
		roundOnce.Do(func() {
			// The logged write completes and a member failure asks
			// for a retire while this one still holds the lock.
			close(release)
			<-wDone
			j.retireSoon()
		})
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	retired := j.retired
	j.mu.Unlock()
	if retired < seq {
		t.Fatalf("record %d of a write that completed before retireSoon is not retired (retired %d)", seq, retired)
	}
}

// A member that fails during the journal replay of an assembly must not
// retire the journal before the replay is durable: the retire wrote
// "everything retired" while records were still unreplayed, and a power
// cut then left their torn stripes without a record, so the chunks of the
// member missing since before the crash reconstructed wrongly.
func TestReplayNotRetiredByMemberFailure(t *testing.T) {
	cfg := Config{Name: "replay", K: 3, M: 2, ChunkSize: layout.BlockSize, RegionSize: layout.BlockSize,
		DataOffset: 256 << 10, AssumeZeroed: true}
	g := layout.Geometry{K: 3, M: 2, Groups: 1, ChunkSize: cfg.ChunkSize, Rows: 1}
	const rowA, rowB = 0, 1
	// s0 holds data in both rows (it fails before the crash), y parity in
	// both (it fails during the replay).
	s0, y := -1, -1
	for slot := 0; slot < g.Width(); slot++ {
		pa, pb := g.PosOf(rowA, slot), g.PosOf(rowB, slot)
		if pa < g.K && pb < g.K && s0 < 0 {
			s0 = slot
		}
		if pa >= g.K && pb >= g.K && y < 0 {
			y = slot
		}
	}
	const (
		running = iota
		assembling
	)
	var phase atomic.Int32
	var cut, yDead, s0Dead atomic.Bool
	var jOff int64
	hook := func(op memOp) error {
		switch {
		case cut.Load():
			return errPowerCut
		case op.slot == s0 && s0Dead.Load(), op.slot == y && yDead.Load():
			return ErrMemberIO
		}
		if phase.Load() != assembling {
			return nil
		}
		if op.slot == y && op.write && !op.after && op.off >= cfg.DataOffset {
			yDead.Store(true) // the replay's parity write to y fails
			return ErrMemberIO
		}
		if op.write && op.after && op.off >= jOff && op.off < jOff+journalHdrBlocks*journalBlock {
			cut.Store(true) // the first journal header write landed
		}
		return nil
	}
	hm, devs := hookMembers(g.Width(), 1<<20, hook)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	jOff = v.base.JournalOffset
	want := map[int64][]byte{} // s0's blocks
	for _, row := range []int64{rowA, rowB} {
		p := make([]byte, g.StripeBytes())
		for pos := 0; pos < g.K; pos++ {
			copy(p[pos*layout.BlockSize:], bytes.Repeat([]byte{byte(0x10*(row+1)) + byte(pos)}, layout.BlockSize))
		}
		if _, err := v.WriteAt(p, row*g.StripeBytes()); err != nil {
			t.Fatal(err)
		}
		off := blockOn(t, g, row, s0)
		want[off] = bytes.Clone(p[off-row*g.StripeBytes():][:layout.BlockSize])
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	s0Dead.Store(true)
	if err := v.FailMember(s0); err != nil {
		t.Fatal(err)
	}
	// Journaled writes to both rows, torn by the crash below: their data
	// lands, their parity does not.
	for _, row := range []int64{rowA, rowB} {
		other := g.Slot(0, g.MemberOf(row, (g.PosOf(row, s0)+1)%g.K))
		if _, err := v.WriteAt(bytes.Repeat([]byte{0x7a + byte(row)}, layout.BlockSize), blockOn(t, g, row, other)); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.Status().JournalRecords; n != 2 {
		t.Fatalf("%d journal records, want 2", n)
	}
	v.Abandon()
	var survivors []Member
	for slot, h := range hm {
		if slot == s0 {
			continue
		}
		h.crash(func(off int64) bool {
			row := (off - cfg.DataOffset) / int64(cfg.ChunkSize)
			return off < cfg.DataOffset || g.PosOf(row, slot) < g.K
		})
		survivors = append(survivors, h)
	}
	phase.Store(assembling)
	if v, err := Assemble(survivors, nil, Options{Logger: quietLogger(), SyncResync: true}); err == nil {
		v.Abandon()
	}
	cut.Store(false)
	var last []Member
	for slot, h := range hm {
		h.crash(func(int64) bool { return true })
		if slot != s0 && slot != y {
			last = append(last, h.MemMember)
		}
	}
	v, err = Assemble(last, nil, Options{Logger: quietLogger(), SyncResync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for off, p := range want {
		got := make([]byte, layout.BlockSize)
		if _, err := v.ReadAt(got, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, p) {
			t.Errorf("block %d of slot %d (missing since before the crash, never rewritten) reads 0x%02x, want 0x%02x",
				off/layout.BlockSize, s0, got[0], p[0])
		}
	}
}

// A degraded read of a row the background resync has not reached combines
// parity the crash may have torn. It must not do so silently: the row is
// resynced first when it can be, and otherwise counted as a write hole
// before the read returns (here the crash tore the stripe and its other
// data member is lost before the resync ran, so the block reconstructs
// wrongly and only the count tells).
func TestDegradedReadBeforeResyncCounted(t *testing.T) {
	cfg := integrityCfg()
	g := layout.Geometry{K: 2, M: 1, Groups: 1, ChunkSize: cfg.ChunkSize, Rows: 1}
	const row = 1
	d0, d1, par := g.Slot(0, g.MemberOf(row, 0)), g.Slot(0, g.MemberOf(row, 1)), g.Slot(0, g.MemberOf(row, 2))
	hm, devs := hookMembers(3, integritySize, nil)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	off0, off1 := blockOn(t, g, row, d0), blockOn(t, g, row, d1)
	old1 := bytes.Repeat([]byte{0x11}, layout.BlockSize)
	if _, err := v.WriteAt(bytes.Repeat([]byte{0x22}, layout.BlockSize), off0); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(old1, off1); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(bytes.Repeat([]byte{0x77}, layout.BlockSize), off0); err != nil {
		t.Fatal(err)
	}
	v.Abandon()
	for slot, h := range hm {
		h.crash(func(off int64) bool { return slot != par || off < cfg.DataOffset })
	}
	gate := make(chan struct{})
	defer close(gate)
	v, err = assemble(devs, nil, Options{Logger: quietLogger()}, testHooks{resyncGate: gate})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Abandon()
	if err := v.FailMember(d1); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, layout.BlockSize)
	if _, err := v.ReadAt(got, off1); err != nil {
		t.Fatal(err)
	}
	if n := v.Status().WriteHoleStripes; !bytes.Equal(got, old1) && n == 0 {
		t.Fatalf("degraded read before the resync returned 0x%02x for a block flushed as 0x11 and counted no write hole", got[0])
	}
}

// A write that skips a member because it is marked failed in memory must
// not be acknowledged before the metadata write recording the failure has
// finished: here that write is cut by a power failure, the assembly after
// it still trusts the member, and an acknowledged FUA write was gone.
// (Found by TestSchedule.)
func TestWriteSkippingUnrecordedFailure(t *testing.T) {
	const slot = 0
	var armed, cut atomic.Bool
	reached, release := make(chan struct{}), make(chan error)
	var once sync.Once
	hm, devs := hookMembers(3, integritySize, func(op memOp) error {
		if cut.Load() {
			return errPowerCut
		}
		// Hold FailMember's first superblock write.
		if armed.Load() && op.write && !op.after && op.off == superblock.CopyAOffset {
			var err error
			once.Do(func() { close(reached); err = <-release })
			return err
		}
		return nil
	})
	v, err := Create(integrityCfg(), devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	g := v.Geometry()
	row := rowWithData(g, 0, slot)
	off := blockOn(t, g, row, slot)
	armed.Store(true)
	failDone := make(chan error)
	go func() { failDone <- v.FailMember(slot) }()
	<-reached
	p := bytes.Repeat([]byte{0x77}, layout.BlockSize)
	var werr error
	wDone := make(chan struct{})
	go func() {
		defer close(wDone)
		_, werr = v.WriteAtFUA(p, off)
	}()
	// Let the write run as far as it can (done, or waiting for the
	// metadata write), then cut the power.
	quiescent(make([]byte, 64<<10))
	cut.Store(true)
	release <- errPowerCut
	<-failDone
	<-wDone
	v.Abandon()
	var ms []Member
	for _, h := range hm {
		h.crash(func(int64) bool { return false })
		ms = append(ms, h.MemMember)
	}
	v, err = Assemble(ms, nil, Options{Logger: quietLogger(), SyncResync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, layout.BlockSize)
	if _, err := v.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if werr == nil && !bytes.Equal(got, p) {
		t.Fatalf("acknowledged FUA write of 0x77 at %d reads back 0x%02x after a power cut", off, got[0])
	}
	t.Logf("write: %v", werr)
}
