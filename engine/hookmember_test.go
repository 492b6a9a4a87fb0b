package engine

import (
	"errors"
	"fmt"
	"sync"
)

// memOp describes one member operation seen by a hookMember.
type memOp struct {
	slot  int
	write bool
	fua   bool // a write that is durable when it completes
	flush bool
	off   int64
	n     int
	after bool // the hook runs after the operation completed (result in err)
	owner int  // which engine instance issued it (0; 1 for a new owner)
}

func (op memOp) String() string {
	who := ""
	if op.owner != 0 {
		who = fmt.Sprintf("owner %d: ", op.owner)
	}
	kind := "read"
	switch {
	case op.flush:
		return fmt.Sprintf("%sslot %d flush", who, op.slot)
	case op.fua:
		kind = "write fua"
	case op.write:
		kind = "write"
	}
	return fmt.Sprintf("%sslot %d %s %d+%d", who, op.slot, kind, op.off, op.n)
}

// errPowerCut is returned by hooked members after a simulated power cut.
var errPowerCut = errors.New("power cut")

// hookMember is a MemMember whose every operation first calls hook (which
// may block until the test releases it, or return an error that fails the
// operation without reaching the member) and then, after it completed,
// calls hook again with after set. It tracks the offsets of its unflushed
// writes so that a test can choose which of them survive a power cut.
type hookMember struct {
	*MemMember
	slot  int
	owner int  // memOp.owner of its operations
	paths bool // a path to a disk another hookMember reaches too: Close leaves the disk open
	hook  func(op memOp) error

	mu      sync.Mutex
	pending []int64 // offsets of writes since the last flush, in order
}

func (h *hookMember) call(op memOp) error {
	if h.hook == nil {
		return nil
	}
	return h.hook(op)
}

func (h *hookMember) ReadAt(p []byte, off int64) (int, error) {
	op := memOp{slot: h.slot, owner: h.owner, off: off, n: len(p)}
	if err := h.call(op); err != nil {
		return 0, err
	}
	n, err := h.MemMember.ReadAt(p, off)
	op.after = true
	_ = h.call(op)
	return n, err
}

func (h *hookMember) WriteAt(p []byte, off int64) (int, error) {
	op := memOp{slot: h.slot, owner: h.owner, write: true, off: off, n: len(p)}
	if err := h.call(op); err != nil {
		return 0, err
	}
	h.mu.Lock()
	n, err := h.MemMember.WriteAt(p, off)
	if err == nil {
		h.pending = append(h.pending, off)
	}
	h.mu.Unlock()
	op.after = true
	_ = h.call(op)
	return n, err
}

// WriteAtFUA implements FUAWriter: a hooked write that is durable when it
// completes, so a power cut cannot drop it.
func (h *hookMember) WriteAtFUA(p []byte, off int64) (int, error) {
	op := memOp{slot: h.slot, owner: h.owner, write: true, fua: true, off: off, n: len(p)}
	if err := h.call(op); err != nil {
		return 0, err
	}
	h.mu.Lock()
	n, err := h.MemMember.WriteAtFUA(p, off)
	h.mu.Unlock()
	op.after = true
	_ = h.call(op)
	return n, err
}

func (h *hookMember) Flush() error {
	op := memOp{slot: h.slot, owner: h.owner, flush: true}
	if err := h.call(op); err != nil {
		return err
	}
	h.mu.Lock()
	err := h.MemMember.Flush()
	if err == nil {
		h.pending = nil
	}
	h.mu.Unlock()
	op.after = true
	_ = h.call(op)
	return err
}

// errPathGone is returned by hooked members whose path the storage fence
// cut (an NVMe host path error: ENOLINK); they classify it as unreachable.
var errPathGone = errors.New("path gone (fenced)")

// Unreachable implements FailureClassifier.
func (h *hookMember) Unreachable(err error) bool { return errors.Is(err, errPathGone) }

// Close implements Member; a path's Close leaves the shared disk open.
func (h *hookMember) Close() error {
	if h.paths {
		return nil
	}
	return h.MemMember.Close()
}

// crash is a power cut of the member: each unflushed write survives when
// keep returns true for its member offset. The member is usable again
// afterwards (without its hook).
func (h *hookMember) crash(keep func(off int64) bool) {
	h.mu.Lock()
	offs := h.pending
	h.pending = nil
	h.mu.Unlock()
	i := 0
	h.MemMember.Crash(func() bool {
		off := offs[i]
		i++
		return keep(off)
	})
	h.MemMember.Reopen()
}

// hookMembers returns n hooked members of size bytes sharing hook.
func hookMembers(n int, size int64, hook func(memOp) error) ([]*hookMember, []Member) {
	hm := make([]*hookMember, n)
	devs := make([]Member, n)
	for i := range hm {
		hm[i] = &hookMember{MemMember: NewMemMember(size), slot: i, hook: hook}
		devs[i] = hm[i]
	}
	return hm, devs
}
