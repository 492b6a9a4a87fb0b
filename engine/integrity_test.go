package engine

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
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
