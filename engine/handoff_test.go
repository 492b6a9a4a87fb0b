package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// HandOff of a frozen volume fails the requests held at the gate, and
// later ones, with ErrHandedOff: no member write or read, no member marked
// failed, nothing acknowledged; a flush request is done (member flushes
// only), and Close writes nothing. A volume that is not frozen refuses it.
func TestHandOffFailsHeldRequests(t *testing.T) {
	const writers = 4
	r := newFreezeRig(t, writers)
	if err := r.v.HandOff(); !errors.Is(err, ErrNotFrozen) {
		t.Fatalf("HandOff of a running volume: %v, want %v", err, ErrNotFrozen)
	}
	epoch := r.v.Status().Epoch
	r.start()
	r.freeze()
	r.waitHeld(writers)
	acked := r.acked.Load()
	if r.v.HandedOff() {
		t.Fatal("HandedOff before HandOff")
	}
	if err := r.v.HandOff(); err != nil {
		t.Fatal(err)
	}
	if !r.v.HandedOff() || !r.v.Frozen() {
		t.Fatalf("after HandOff: handed off %v, frozen %v", r.v.HandedOff(), r.v.Frozen())
	}
	r.wg.Wait() // every held writer returns
	for i, err := range r.errs {
		if !errors.Is(err, ErrHandedOff) {
			t.Errorf("writer %d: %v, want %v", i, err, ErrHandedOff)
		}
	}
	if r.acked.Load() != acked {
		t.Errorf("%d writes acknowledged after the freeze", r.acked.Load()-acked)
	}
	// Later requests, reads included, fail the same way without waiting.
	buf := make([]byte, layout.BlockSize)
	if _, err := r.v.WriteAt(buf, r.offs[0]); !errors.Is(err, ErrHandedOff) {
		t.Errorf("write after HandOff: %v, want %v", err, ErrHandedOff)
	}
	if _, err := r.v.ReadAt(buf, r.offs[1]); !errors.Is(err, ErrHandedOff) {
		t.Errorf("read after HandOff: %v, want %v", err, ErrHandedOff)
	}
	// A flush is carried out: it writes nothing new, and a flush handed
	// off would be lost (the host completes a failed-over flush).
	r.checkNoViolations("handed off, before the flush")
	if err := r.v.Flush(); err != nil {
		t.Errorf("flush after HandOff: %v, want it done", err)
	}
	r.mu.Lock()
	flushed := 0
	for _, op := range r.violations {
		if !strings.HasSuffix(op, " flush") {
			t.Errorf("member operation other than a flush after the hand-off: %s", op)
		}
		flushed++
	}
	r.violations = nil
	r.mu.Unlock()
	if flushed == 0 {
		t.Error("the flush request flushed no member")
	}
	if d, ok := r.v.PlanRead(buf, r.offs[1]); ok {
		d.Cancel()
		t.Error("a direct read was planned on a frozen volume")
	}
	st := r.v.Status()
	for slot, m := range st.Members {
		if m.Role == superblock.RoleFailed {
			t.Errorf("slot %d marked failed by the hand-off: %+v", slot, m)
		}
	}
	r.checkNoViolations("handed off")
	if err := r.v.HandOff(); err != nil {
		t.Errorf("second HandOff: %v", err)
	}
	var h interface{ HandOff() bool }
	if !errors.As(fmt.Errorf("wrapped: %w", ErrHandedOff), &h) || !h.HandOff() {
		t.Error("ErrHandedOff, wrapped, does not say HandOff (kernel/ublk.HandOffError)")
	}
	_ = epoch
	if err := r.v.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close of a handed-off volume: %v, want %v", err, ErrClosed)
	}
	r.checkNoViolations("closed after the hand-off")
}

// A direct read (PlanRead) counts at the freeze gate: Freeze waits until
// it finished, and a frozen volume plans none.
func TestDirectReadHeldByFreeze(t *testing.T) {
	r := newFreezeRig(t, 1)
	buf := make([]byte, layout.BlockSize)
	d, ok := r.v.PlanRead(buf, r.offs[0])
	if !ok {
		t.Fatal("healthy read not planned")
	}
	draining := make(chan struct{})
	r.v.gate.drainWait = func() { close(draining) }
	returned := make(chan struct{})
	go func() { r.v.Freeze(); close(returned) }()
	select {
	case <-draining: // Freeze waits for the read
	case <-returned:
		t.Fatal("Freeze returned while a planned direct read was in flight")
	}
	for i := range d.IOs {
		io := &d.IOs[i]
		_, io.Err = io.Dev.ReadAt(io.Buf, io.Off)
	}
	if _, err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	<-returned
	if d, ok := r.v.PlanRead(buf, r.offs[0]); ok {
		d.Cancel()
		t.Fatal("a frozen volume planned a direct read")
	}
}

// A handed-off volume that this node holds again is thawed like any frozen
// one: with no newer owner on the members, requests are served again and
// the blocks written before the freeze read back; the new epoch is on
// every member. Put back the old rule (Thaw after HandOff refused) and
// this fails at the Thaw.
func TestThawAfterHandOff(t *testing.T) {
	const writers = 2
	r := newFreezeRig(t, writers)
	epoch := r.v.Status().Epoch
	r.start()
	r.freeze()
	r.waitHeld(writers)
	if err := r.v.HandOff(); err != nil {
		t.Fatal(err)
	}
	r.wg.Wait()
	r.afterFreeze.Store(false)
	if err := r.v.Thaw(epoch + 1); err != nil {
		t.Fatalf("Thaw after HandOff: %v", err)
	}
	if r.v.Frozen() || r.v.HandedOff() {
		t.Fatalf("after Thaw: frozen %v, handed off %v", r.v.Frozen(), r.v.HandedOff())
	}
	got := make([]byte, layout.BlockSize)
	for i, off := range r.offs {
		if _, err := r.v.ReadAt(got, off); err != nil || !bytes.Equal(got, blockOf(r.last[i].Load(), i)) {
			t.Fatalf("writer %d: block reads %q (%v), want its last acknowledged value %d", i, got[:20], err, r.last[i].Load())
		}
	}
	next := blockOf(1000, 0)
	if _, err := r.v.WriteAt(next, r.offs[0]); err != nil {
		t.Fatalf("write after the thaw: %v", err)
	}
	if _, err := r.v.ReadAt(got, r.offs[0]); err != nil || !bytes.Equal(got, next) {
		t.Fatalf("write after the thaw reads back %q (%v)", got[:20], err)
	}
	for _, h := range r.hm {
		if sb, err := superblock.ReadCopies(h.MemMember); err != nil || sb.Epoch != epoch+1 {
			t.Fatalf("slot %d: epoch %v (%v) on disk, want %d", h.slot, sb.Epoch, err, epoch+1)
		}
	}
}

// A handed-off volume whose members a newer owner assembled meanwhile is
// fenced at Thaw, and its requests go on failing as handed off (the host
// retries them on the new owner's path), never as ErrFenced (an I/O error
// at the host).
func TestHandOffThenFenced(t *testing.T) {
	r := newFreezeRig(t, 1)
	epoch := r.v.Status().Epoch
	r.start()
	r.freeze()
	r.waitHeld(1)
	if err := r.v.HandOff(); err != nil {
		t.Fatal(err)
	}
	r.wg.Wait()
	devs := make([]Member, len(r.hm))
	for i, h := range r.hm {
		devs[i] = h.MemMember
	}
	v2, err := Assemble(devs, nil, Options{Logger: quietLogger(), Epoch: epoch + 1})
	if err != nil {
		t.Fatal(err)
	}
	v2.Abandon()
	if err := r.v.Thaw(epoch + 2); !errors.Is(err, ErrFenced) {
		t.Fatalf("Thaw after a newer owner ran: %v, want %v", err, ErrFenced)
	}
	if _, err := r.v.WriteAt(blockOf(7, 0), r.offs[0]); !errors.Is(err, ErrHandedOff) {
		t.Fatalf("write on the fenced, handed-off volume: %v, want %v", err, ErrHandedOff)
	}
}
