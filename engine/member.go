package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"
)

// Member is one device of a volume: anything with positional I/O. Files and
// block devices (*os.File) qualify through FileMember; an O_DIRECT or
// io_uring member can replace it without touching the engine's logic.
//
// ReadAt and WriteAt must be safe for concurrent use on disjoint ranges.
// WriteAt may complete into a volatile cache; Flush must make every write
// that completed before it was called durable.
type Member interface {
	io.ReaderAt
	io.WriterAt
	Flush() error
	Size() (int64, error)
	Close() error
}

// FileMember is a Member backed by an *os.File (a regular file or a block
// device). Flush calls fsync.
type FileMember struct {
	f *os.File
}

// OpenFileMember opens path read-write as a member.
func OpenFileMember(path string) (*FileMember, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open member: %w", err)
	}
	return &FileMember{f: f}, nil
}

// NewFileMember wraps an open file.
func NewFileMember(f *os.File) *FileMember { return &FileMember{f: f} }

// ReadAt implements io.ReaderAt.
func (m *FileMember) ReadAt(p []byte, off int64) (int, error) { return m.f.ReadAt(p, off) }

// WriteAt implements io.WriterAt.
func (m *FileMember) WriteAt(p []byte, off int64) (int, error) { return m.f.WriteAt(p, off) }

// Flush makes completed writes durable (fsync).
func (m *FileMember) Flush() error { return m.f.Sync() }

// Size returns the file size; for block devices the size is found by
// seeking to the end.
func (m *FileMember) Size() (int64, error) {
	st, err := m.f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Mode().IsRegular() {
		return st.Size(), nil
	}
	return m.f.Seek(0, io.SeekEnd)
}

// Close closes the file.
func (m *FileMember) Close() error { return m.f.Close() }

// Name returns the file name.
func (m *FileMember) Name() string { return m.f.Name() }

// BufferAlign is the address alignment of the buffers the engine allocates
// for member I/O (chunk and journal buffers): a page, which satisfies
// O_DIRECT on every Linux block device.
const BufferAlign = 4096

// AlignedBuffer returns a zeroed n-byte slice whose first byte is aligned
// to BufferAlign, so that an O_DIRECT Executor can pass it to the kernel
// without a bounce copy. (Go does not promise alignment for make, so the
// slice is cut out of a slightly larger allocation.)
func AlignedBuffer(n int) []byte {
	b := make([]byte, n+BufferAlign)
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (BufferAlign - 1))
	return b[skip : skip+n : skip+n]
}

// IO is one member operation produced by the engine's planning: a read
// (the zero value), a write (Write), or a flush of Dev (Flush; Buf, Off and
// Write are then unused). A write with FUA set is durable when it completes
// (Force Unit Access); it says nothing of other writes to Dev.
type IO struct {
	Dev   Member
	Write bool
	FUA   bool
	Flush bool
	Buf   []byte
	Off   int64
	Err   error // set by the Executor
}

// FUAWriter is implemented by Members that can make one write durable
// without flushing the rest of their cache (RWF_DSYNC, NVMe FUA). An FUA
// IO on a Member without it is a write followed by a Flush.
//
// A type that embeds a FUAWriter and overrides WriteAt must override
// WriteAtFUA too: the promoted method would bypass its WriteAt.
type FUAWriter interface {
	WriteAtFUA(p []byte, off int64) (int, error)
}

// Executor performs batches of member I/O. The engine hands it every
// independent operation of one step (all reads of a stripe, all writes of a
// stripe) at once, so an implementation may run them in parallel or submit
// them as one io_uring batch. Execute returns when every IO has completed
// and its Err is set. Implementations must be safe for concurrent use.
type Executor interface {
	Execute(ios []IO)
}

// SyncExecutor runs a batch one IO after another in the calling goroutine:
// the right choice when callers already provide the parallelism (ublk
// queues) and members are memory-speed (tmpfs, page cache).
type SyncExecutor struct{}

// Execute implements Executor.
func (SyncExecutor) Execute(ios []IO) {
	for i := range ios {
		ios[i].Err = doIO(&ios[i])
	}
}

// ParallelExecutor runs each IO of a batch in its own goroutine: the right
// choice for real devices with latency, where one request's member I/Os
// should overlap.
type ParallelExecutor struct{}

// Execute implements Executor.
func (ParallelExecutor) Execute(ios []IO) {
	if len(ios) == 1 {
		ios[0].Err = doIO(&ios[0])
		return
	}
	var wg sync.WaitGroup
	for i := range ios {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ios[i].Err = doIO(&ios[i])
		}()
	}
	wg.Wait()
}

func doIO(io *IO) error {
	if io.Flush {
		if err := io.Dev.Flush(); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		return nil
	}
	var n int
	var err error
	switch {
	case io.Write && io.FUA:
		n, err = writeFUA(io.Dev, io.Buf, io.Off)
	case io.Write:
		n, err = io.Dev.WriteAt(io.Buf, io.Off)
	default:
		n, err = io.Dev.ReadAt(io.Buf, io.Off)
	}
	if err == nil && n != len(io.Buf) {
		err = fmt.Errorf("short transfer %d of %d bytes", n, len(io.Buf))
	}
	if err != nil {
		op := "read"
		if io.Write {
			op = "write"
		}
		return fmt.Errorf("%s %d bytes at %d: %w", op, len(io.Buf), io.Off, err)
	}
	return nil
}

// writeFUA writes p at off on d and makes that write durable.
func writeFUA(d Member, p []byte, off int64) (int, error) {
	if fw, ok := d.(FUAWriter); ok {
		return fw.WriteAtFUA(p, off)
	}
	n, err := d.WriteAt(p, off)
	if err != nil {
		return n, err
	}
	if err := d.Flush(); err != nil {
		return n, fmt.Errorf("flush after write: %w", err)
	}
	return n, nil
}

// ErrMemberIO is returned by MemMember when a failure is injected.
var ErrMemberIO = errors.New("injected member I/O error")

// MemMember is an in-memory Member that models a disk with a volatile write
// cache: completed writes are visible to reads at once but become durable
// only at Flush. Crash drops (a random subset of) the unflushed writes, and
// SetFailed makes every operation fail. It is meant for tests and
// benchmarks of the engine and of code built on it.
type MemMember struct {
	mu      sync.Mutex
	durable []byte
	pending []pendingWrite
	visible []byte // durable + pending, what reads see
	failed  bool
	closed  bool
}

type pendingWrite struct {
	off  int64
	data []byte
}

// NewMemMember returns a zeroed in-memory member of size bytes.
func NewMemMember(size int64) *MemMember {
	return &MemMember{durable: make([]byte, size), visible: make([]byte, size)}
}

// ReadAt implements io.ReaderAt.
func (m *MemMember) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed || m.closed {
		return 0, ErrMemberIO
	}
	if off < 0 || off > int64(len(m.visible)) {
		return 0, io.EOF
	}
	n := copy(p, m.visible[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements io.WriterAt.
func (m *MemMember) WriteAt(p []byte, off int64) (int, error) {
	return m.write(p, off, func() {
		m.pending = append(m.pending, pendingWrite{off: off, data: append([]byte(nil), p...)})
	})
}

// WriteAtFUA implements FUAWriter: the write is durable when it returns,
// the member's other unflushed writes stay volatile. An unflushed earlier
// write to the same bytes can no longer bring their old contents back at a
// crash (a disk's cache holds the newest data of a block).
func (m *MemMember) WriteAtFUA(p []byte, off int64) (int, error) {
	return m.write(p, off, func() {
		copy(m.durable[off:], p)
		end := off + int64(len(p))
		for _, w := range m.pending {
			lo, hi := max(w.off, off), min(w.off+int64(len(w.data)), end)
			if lo < hi {
				copy(w.data[lo-w.off:hi-w.off], p[lo-off:hi-off])
			}
		}
	})
}

// write makes p visible at off and calls keep, under mu, to record it.
func (m *MemMember) write(p []byte, off int64, keep func()) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed || m.closed {
		return 0, ErrMemberIO
	}
	if off < 0 || off+int64(len(p)) > int64(len(m.visible)) {
		return 0, fmt.Errorf("write beyond end of member")
	}
	copy(m.visible[off:], p)
	keep()
	return len(p), nil
}

// Flush makes completed writes durable.
func (m *MemMember) Flush() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed || m.closed {
		return ErrMemberIO
	}
	for _, w := range m.pending {
		copy(m.durable[w.off:], w.data)
	}
	m.pending = nil
	return nil
}

// Size implements Member.
func (m *MemMember) Size() (int64, error) { return int64(len(m.durable)), nil }

// Close implements Member. A closed MemMember fails I/O until Reopen.
func (m *MemMember) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Reopen makes a closed member usable again (a restart).
func (m *MemMember) Reopen() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = false
}

// SetFailed makes every later operation fail (failed == true) or succeed.
func (m *MemMember) SetFailed(failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed = failed
}

// Crash models a power loss: each unflushed write survives when keep
// returns true for it (keep == nil drops them all); the member is then
// closed until Reopen.
func (m *MemMember) Crash(keep func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.pending {
		if keep != nil && keep() {
			copy(m.durable[w.off:], w.data)
		}
	}
	m.pending = nil
	copy(m.visible, m.durable)
	m.closed = true
}

// Corrupt overwrites durable and visible bytes without going through the
// write path (silent corruption, for scrub tests).
func (m *MemMember) Corrupt(off int64, p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.durable[off:], p)
	copy(m.visible[off:], p)
}
