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
	flush bool
	off   int64
	n     int
	after bool // the hook runs after the operation completed (result in err)
}

func (op memOp) String() string {
	kind := "read"
	switch {
	case op.flush:
		return fmt.Sprintf("slot %d flush", op.slot)
	case op.write:
		kind = "write"
	}
	return fmt.Sprintf("slot %d %s %d+%d", op.slot, kind, op.off, op.n)
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
	slot int
	hook func(op memOp) error

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
	op := memOp{slot: h.slot, off: off, n: len(p)}
	if err := h.call(op); err != nil {
		return 0, err
	}
	n, err := h.MemMember.ReadAt(p, off)
	op.after = true
	_ = h.call(op)
	return n, err
}

func (h *hookMember) WriteAt(p []byte, off int64) (int, error) {
	op := memOp{slot: h.slot, write: true, off: off, n: len(p)}
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

func (h *hookMember) Flush() error {
	op := memOp{slot: h.slot, flush: true}
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
