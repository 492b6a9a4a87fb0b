package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// HandOff of a frozen volume fails the requests held at the gate, and
// later ones, with ErrHandedOff: no member write or read, no member marked
// failed, nothing acknowledged; a flush request is done (member flushes
// only); Thaw is refused for good, and Close writes nothing. A volume that
// is not frozen refuses it.
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
	if err := r.v.Thaw(epoch + 5); !errors.Is(err, ErrHandedOff) {
		t.Fatalf("Thaw after HandOff: %v, want %v", err, ErrHandedOff)
	}
	if err := r.v.HandOff(); err != nil {
		t.Errorf("second HandOff: %v", err)
	}
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
