//go:build linux

package uring

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
	"golang.org/x/sys/unix"
)

// CQE is one completion.
type CQE struct {
	UserData uint64
	Res      int32 // >= 0 on success, -errno on failure
	Flags    uint32
}

// Err returns the completion's error, or nil if Res is not negative.
func (c CQE) Err() error {
	if c.Res < 0 {
		return unix.Errno(-c.Res)
	}
	return nil
}

// SQE is a submission queue entry in the ring's shared memory, as returned by
// Ring.NextSQE. Its fields are the kernel's struct io_uring_sqe.
type SQE ublksys.SQE

// Ring is one io_uring instance. See the package documentation for the
// threading rules.
type Ring struct {
	fd      int
	sqeSize int

	ringMem []byte // SQ and CQ rings (one mapping with IORING_FEAT_SINGLE_MMAP)
	cqMem   []byte // CQ ring when it is a separate mapping
	sqeMem  []byte

	sqHead, sqTail, sqFlags *uint32
	sqMask, sqEntries       uint32
	cqHead, cqTail          *uint32
	cqMask                  uint32
	cqes                    unsafe.Pointer

	// SQEs handed out by NextSQE but not yet published to the kernel.
	localTail uint32
}

// New sets up a ring with at least entries submission queue entries.
func New(entries uint32, cfg *Config) (*Ring, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	var p ublksys.UringParams
	if cfg.SQE128 {
		p.Flags |= ublksys.IORING_SETUP_SQE128
	}
	if cfg.DeferTaskrun {
		p.Flags |= ublksys.IORING_SETUP_SINGLE_ISSUER | ublksys.IORING_SETUP_DEFER_TASKRUN
	}
	if cfg.CoopTaskrun {
		p.Flags |= ublksys.IORING_SETUP_COOP_TASKRUN
	}
	if cfg.CQEntries != 0 {
		p.Flags |= ublksys.IORING_SETUP_CQSIZE
		p.CqEntries = cfg.CQEntries
	}
	fd, err := ublksys.Setup(entries, &p)
	if err != nil {
		return nil, setupError(err, cfg)
	}
	r := &Ring{fd: fd, sqeSize: ublksys.SQESize}
	if cfg.SQE128 {
		r.sqeSize = ublksys.SQE128Size
	}
	if err := r.mmap(&p); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func setupError(err error, cfg *Config) error {
	switch {
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("io_uring_setup: %w (requires a kernel with io_uring, Linux >= 5.1, CONFIG_IO_URING=y): %w", ErrNotSupported, err)
	case errors.Is(err, unix.EPERM):
		b, _ := os.ReadFile("/proc/sys/kernel/io_uring_disabled")
		if len(b) > 0 && b[0] != '0' {
			return fmt.Errorf("io_uring_setup: %w (io_uring is disabled: requires sysctl kernel.io_uring_disabled=0): %w", ErrNotSupported, err)
		}
		return fmt.Errorf("io_uring_setup: %w", err)
	case errors.Is(err, unix.EINVAL) && cfg.SQE128:
		return fmt.Errorf("io_uring_setup with 128-byte SQEs: %w (requires Linux >= 5.19): %w", ErrNotSupported, err)
	case errors.Is(err, unix.EINVAL) && cfg.DeferTaskrun:
		return fmt.Errorf("io_uring_setup with DEFER_TASKRUN: %w (requires Linux >= 6.1): %w", ErrNotSupported, err)
	case errors.Is(err, unix.EINVAL) && cfg.CoopTaskrun:
		return fmt.Errorf("io_uring_setup with COOP_TASKRUN: %w (requires Linux >= 5.19): %w", ErrNotSupported, err)
	}
	return fmt.Errorf("io_uring_setup: %w", err)
}

func (r *Ring) mmap(p *ublksys.UringParams) error {
	sqSize := int(p.SqOff.Array) + int(p.SqEntries)*4
	cqSize := int(p.CqOff.Cqes) + int(p.CqEntries)*int(unsafe.Sizeof(ublksys.CQE{}))
	single := p.Features&ublksys.IORING_FEAT_SINGLE_MMAP != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	r.ringMem, err = unix.Mmap(r.fd, ublksys.IORING_OFF_SQ_RING, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap io_uring SQ ring: %w", err)
	}
	cq := r.ringMem
	if !single {
		r.cqMem, err = unix.Mmap(r.fd, ublksys.IORING_OFF_CQ_RING, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("mmap io_uring CQ ring: %w", err)
		}
		cq = r.cqMem
	}
	r.sqeMem, err = unix.Mmap(r.fd, ublksys.IORING_OFF_SQES, int(p.SqEntries)*r.sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap io_uring SQEs: %w", err)
	}
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead = u32(r.ringMem, p.SqOff.Head)
	r.sqTail = u32(r.ringMem, p.SqOff.Tail)
	r.sqFlags = u32(r.ringMem, p.SqOff.Flags)
	r.sqMask = *u32(r.ringMem, p.SqOff.RingMask)
	r.sqEntries = *u32(r.ringMem, p.SqOff.RingEntries)
	r.cqHead = u32(cq, p.CqOff.Head)
	r.cqTail = u32(cq, p.CqOff.Tail)
	r.cqMask = *u32(cq, p.CqOff.RingMask)
	r.cqes = unsafe.Pointer(&cq[p.CqOff.Cqes])
	// SQ entries are always used in ring order, so the indirection array is
	// the identity, written once.
	arr := unsafe.Slice((*uint32)(unsafe.Pointer(&r.ringMem[p.SqOff.Array])), p.SqEntries)
	for i := range arr {
		arr[i] = uint32(i)
	}
	r.localTail = atomic.LoadUint32(r.sqTail)
	return nil
}

// Close unmaps the ring and closes its file descriptor. Requests still in
// flight are cancelled by the kernel.
func (r *Ring) Close() error {
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.ringMem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.ringMem = nil, nil, nil
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("close io_uring: %w", err)
	}
	return nil
}

// Fd returns the ring's file descriptor.
func (r *Ring) Fd() int { return r.fd }

// Entries returns the size of the submission queue.
func (r *Ring) Entries() uint32 { return r.sqEntries }

// NextSQE returns a zeroed submission queue entry to fill in, or ErrSQFull.
// The entry reaches the kernel with the next Submit or SubmitAndWait.
func (r *Ring) NextSQE() (*SQE, error) {
	head := atomic.LoadUint32(r.sqHead)
	if r.localTail-head >= r.sqEntries {
		return nil, ErrSQFull
	}
	off := uintptr(r.localTail&r.sqMask) * uintptr(r.sqeSize)
	sqe := unsafe.Pointer(&r.sqeMem[off])
	clear(unsafe.Slice((*byte)(sqe), r.sqeSize))
	r.localTail++
	return (*SQE)(sqe), nil
}

// Pending returns the number of prepared entries not yet submitted.
func (r *Ring) Pending() uint32 { return r.localTail - atomic.LoadUint32(r.sqTail) }

// Submit publishes prepared entries to the kernel without waiting.
func (r *Ring) Submit() (int, error) { return r.SubmitAndWait(0) }

// SubmitAndWait publishes prepared entries and waits until at least waitNr
// completions are available. It retries when interrupted by a signal.
func (r *Ring) SubmitAndWait(waitNr uint32) (int, error) {
	atomic.StoreUint32(r.sqTail, r.localTail)
	toSubmit := r.localTail - atomic.LoadUint32(r.sqHead)
	var flags uint32
	if waitNr > 0 {
		flags |= ublksys.IORING_ENTER_GETEVENTS
	}
	for {
		n, err := ublksys.Enter(r.fd, toSubmit, waitNr, flags)
		if err == unix.EINTR {
			// Submitted entries are not resubmitted: recompute what is left.
			toSubmit = r.localTail - atomic.LoadUint32(r.sqHead)
			continue
		}
		if err != nil {
			return n, fmt.Errorf("io_uring_enter: %w", err)
		}
		return n, nil
	}
}

// cqe returns the completion at ring index i.
func (r *Ring) cqe(i uint32) *ublksys.CQE {
	return (*ublksys.CQE)(unsafe.Add(r.cqes, uintptr(i&r.cqMask)*unsafe.Sizeof(ublksys.CQE{})))
}

// PeekCQE returns the oldest available completion without waiting and marks
// it consumed.
func (r *Ring) PeekCQE() (CQE, bool) {
	head := atomic.LoadUint32(r.cqHead)
	if head == atomic.LoadUint32(r.cqTail) {
		return CQE{}, false
	}
	c := r.cqe(head)
	out := CQE{UserData: c.UserData, Res: c.Res, Flags: c.Flags}
	atomic.StoreUint32(r.cqHead, head+1)
	return out, true
}

// WaitCQE submits anything pending, then waits for and consumes one completion.
func (r *Ring) WaitCQE() (CQE, error) {
	for {
		if c, ok := r.PeekCQE(); ok {
			return c, nil
		}
		if _, err := r.SubmitAndWait(1); err != nil {
			return CQE{}, err
		}
	}
}

// ForEachCQE calls fn for every available completion, in order, and consumes
// them. It returns how many it saw. fn may prepare new SQEs.
func (r *Ring) ForEachCQE(fn func(CQE)) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	n := 0
	for ; head != tail; head++ {
		c := r.cqe(head)
		fn(CQE{UserData: c.UserData, Res: c.Res, Flags: c.Flags})
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

// Probe reports which opcodes the kernel supports (IORING_REGISTER_PROBE,
// Linux 5.6).
func (r *Ring) Probe() (*Probe, error) {
	const nops = 256
	buf := make([]byte, unsafe.Sizeof(ublksys.Probe{})+nops*unsafe.Sizeof(ublksys.ProbeOp{}))
	_, err := ublksys.Register(r.fd, ublksys.IORING_REGISTER_PROBE, unsafe.Pointer(&buf[0]), nops)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("io_uring probe: %w (requires Linux >= 5.6): %w", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("io_uring probe: %w", err)
	}
	hdr := (*ublksys.Probe)(unsafe.Pointer(&buf[0]))
	ops := unsafe.Slice((*ublksys.ProbeOp)(unsafe.Pointer(&buf[unsafe.Sizeof(ublksys.Probe{})])), hdr.OpsLen)
	p := &Probe{LastOp: hdr.LastOp}
	for _, op := range ops {
		if op.Flags&ublksys.IO_URING_OP_SUPPORTED != 0 {
			p.supported[op.Op/64] |= 1 << (op.Op % 64)
		}
	}
	return p, nil
}

// Probe is the set of opcodes a kernel supports.
type Probe struct {
	LastOp    uint8
	supported [4]uint64
}

// Supports reports whether opcode op is supported.
func (p *Probe) Supports(op uint8) bool { return p.supported[op/64]&(1<<(op%64)) != 0 }

// RegisterSparseBuffers gives the ring a fixed-buffer table of n empty
// entries (IORING_REGISTER_BUFFERS2 with IORING_RSRC_REGISTER_SPARSE,
// Linux 5.19), for buffers the kernel installs itself, such as ublk
// requests' pages with automatic buffer registration.
func (r *Ring) RegisterSparseBuffers(n uint32) error {
	rr := &ublksys.RsrcRegister{Nr: n, Flags: ublksys.IORING_RSRC_REGISTER_SPARSE}
	if _, err := ublksys.Register(r.fd, ublksys.IORING_REGISTER_BUFFERS2, unsafe.Pointer(rr), ublksys.RsrcRegisterSize); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("io_uring register %d sparse buffers: %w (requires Linux >= 5.19): %w", n, ErrNotSupported, err)
		}
		return fmt.Errorf("io_uring register %d sparse buffers: %w", n, err)
	}
	return nil
}
