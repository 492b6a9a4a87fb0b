package ublk

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// Backend stores the blocks of a ublk device. The engine's volume satisfies
// it; Mem, Null and File are backends for tests, benchmarks and by-hand use.
//
// Every method may be called concurrently from several queues. Offsets and
// lengths are multiples of the device's logical block size and lie inside
// [0, Size()). The slices passed to ReadAt and WriteAt belong to the device:
// a backend must not keep them after returning.
type Backend interface {
	// Size is the device size in bytes; it must not change while served.
	Size() int64
	// ReadAt fills p with the data at off. It returns len(p), nil or an error.
	ReadAt(p []byte, off int64) (int, error)
	// WriteAt stores p at off. When it returns nil the data is visible to
	// later reads; it need not be durable before Flush.
	WriteAt(p []byte, off int64) (int, error)
	// Flush makes every write completed before the call durable. The device
	// advertises a volatile write cache, so the kernel sends flushes (and FUA
	// writes, mapped to WriteAt then Flush unless the backend implements
	// FUAWriter) when the consumer asks for durability.
	Flush() error
}

// HandOffError is implemented by backend errors that give their request
// back to the initiator instead of failing it (the engine volume's
// ErrHandedOff: HandOff of a frozen owner). A request whose error (or an
// error it wraps) reports HandOff true is completed with HandOffResult
// (-ENODATA) instead of its errno: ublk turns that into BLK_STS_MEDIUM,
// the only block status nvmet's bdev backend answers without DNR (Access
// Denied, 0x286), so the Linux NVMe host retries the command; on a port
// whose ANA group is inaccessible or in change that retry is refused with
// an ANA status, which the host fails over to another path at once
// (measured on 6.12, docs/nvmeof.md, "Which completion fails over"). Any
// other errno is final for the host. A backend error that carries ENODATA
// is otherwise completed as EIO, so that ENODATA always means a hand-off.
// The error, not the backend's state, decides: a request failed by a
// hand-off that a thaw ended meanwhile is still handed off.
type HandOffError interface {
	error
	HandOff() bool
}

// HandOffResult is the completion of a request handed off: -ENODATA.
const HandOffResult = -61

// Discarder is implemented by backends that can drop a range (REQ_OP_DISCARD).
// Without it, the device advertises no discard support.
type Discarder interface {
	Discard(off, length int64) error
}

// ZeroWriter is implemented by backends that write zeroes cheaply
// (REQ_OP_WRITE_ZEROES). Without it, zeroes are written with WriteAt.
type ZeroWriter interface {
	WriteZeroes(off, length int64) error
}

// FUAWriter is implemented by backends with a cheaper forced-unit-access
// write than WriteAt followed by Flush.
type FUAWriter interface {
	WriteAtFUA(p []byte, off int64) (int, error)
}

// Mem is a backend in memory: for tests and benchmarks. Data is lost when the
// process exits. It counts the operations it sees, so tests can check that
// flushes and FUA writes reach the backend.
type Mem struct {
	mu   sync.RWMutex
	data []byte
	Stats
}

// Stats counts operations a backend received.
type Stats struct {
	Reads, Writes, Flushes, FUAWrites, Discards, Zeroes atomic.Int64
}

// NewMem returns a zero-filled in-memory backend of size bytes.
func NewMem(size int64) *Mem { return &Mem{data: make([]byte, size)} }

// Size implements Backend.
func (m *Mem) Size() int64 { return int64(len(m.data)) }

func (m *Mem) check(n int, off int64) error {
	if off < 0 || off+int64(n) > int64(len(m.data)) {
		return fmt.Errorf("mem backend: range %d+%d outside size %d", off, n, len(m.data))
	}
	return nil
}

// ReadAt implements Backend.
func (m *Mem) ReadAt(p []byte, off int64) (int, error) {
	if err := m.check(len(p), off); err != nil {
		return 0, err
	}
	m.Reads.Add(1)
	m.mu.RLock()
	copy(p, m.data[off:])
	m.mu.RUnlock()
	return len(p), nil
}

// WriteAt implements Backend.
func (m *Mem) WriteAt(p []byte, off int64) (int, error) {
	if err := m.check(len(p), off); err != nil {
		return 0, err
	}
	m.Writes.Add(1)
	m.mu.Lock()
	copy(m.data[off:], p)
	m.mu.Unlock()
	return len(p), nil
}

// WriteAtFUA implements FUAWriter (and counts FUA writes).
func (m *Mem) WriteAtFUA(p []byte, off int64) (int, error) {
	m.FUAWrites.Add(1)
	return m.WriteAt(p, off)
}

// Flush implements Backend.
func (m *Mem) Flush() error { m.Flushes.Add(1); return nil }

// Discard implements Discarder: the range reads back as zeroes.
func (m *Mem) Discard(off, length int64) error {
	if err := m.check(int(length), off); err != nil {
		return err
	}
	m.Discards.Add(1)
	m.mu.Lock()
	clear(m.data[off : off+length])
	m.mu.Unlock()
	return nil
}

// WriteZeroes implements ZeroWriter.
func (m *Mem) WriteZeroes(off, length int64) error {
	if err := m.check(int(length), off); err != nil {
		return err
	}
	m.Zeroes.Add(1)
	m.mu.Lock()
	clear(m.data[off : off+length])
	m.mu.Unlock()
	return nil
}

// Null is a backend that stores nothing: reads return zeroes (the buffer is
// left as it is, as the kernel's null_blk does), writes are dropped. It
// measures the cost of the ublk path itself.
type Null struct{ size int64 }

// NewNull returns a null backend that claims size bytes.
func NewNull(size int64) *Null { return &Null{size: size} }

// Size implements Backend.
func (n *Null) Size() int64 { return n.size }

// ReadAt implements Backend without touching p.
func (n *Null) ReadAt(p []byte, off int64) (int, error) { return len(p), nil }

// WriteAt implements Backend.
func (n *Null) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }

// Flush implements Backend.
func (n *Null) Flush() error { return nil }

// File is a backend on a regular file or block device. It survives the
// server process, which makes it the backend for recovery tests.
type File struct {
	f    *os.File
	size int64
}

// OpenFile opens path as a backend of size bytes, creating and extending a
// regular file as needed. size 0 means the file's current size.
func OpenFile(path string, size int64) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file backend: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("file backend: %w", err)
	}
	if size == 0 {
		size, err = f.Seek(0, 2)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("file backend: size of %s: %w", path, err)
		}
	} else if fi.Mode().IsRegular() && fi.Size() < size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("file backend: %w", err)
		}
	}
	if size == 0 {
		f.Close()
		return nil, errors.New("file backend: size is 0")
	}
	return &File{f: f, size: size}, nil
}

// Size implements Backend.
func (f *File) Size() int64 { return f.size }

// ReadAt implements Backend.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// WriteAt implements Backend.
func (f *File) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }

// Flush implements Backend with fsync.
func (f *File) Flush() error { return f.f.Sync() }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// DirectReader is implemented by backends whose healthy reads are plain
// reads of files or devices (the engine volume on O_DIRECT members): the
// queue thread submits them on its own io_uring and commits the request
// when they complete, with no hand-off to a worker goroutine and back.
// Requests it does not plan go the usual way.
type DirectReader interface {
	PlanRead(p []byte, off int64) (PlannedRead, bool)
}

// PlannedRead is one read planned by a DirectReader.
type PlannedRead interface {
	// Reads are the file reads to submit: into the request's buffer, or
	// (a read that Finish completes from them, such as a degraded one)
	// into buffers of the backend's own that stay valid until Finish.
	Reads() []FileRead
	// Finish takes each read's result (bytes or -errno, in the order of
	// Reads) and returns the request's error. When a read failed it may
	// block (the backend redoes the request another way), so the queue
	// then calls it from a worker.
	Finish(res []int32) error
}

// FileRead is one positional read of a file descriptor.
type FileRead struct {
	Fd  int
	Buf []byte
	Off int64
}

// DirectWriter is implemented by backends whose healthy small writes are
// rounds of plain file I/O (the engine volume's read-modify-write: reads
// of the old data and parity, then the writes): the queue thread submits
// each round on its own io_uring, with no hand-off to a worker goroutine
// and back. Writes it does not plan go the usual way.
type DirectWriter interface {
	PlanWrite(p []byte, off int64) (PlannedWrite, bool)
}

// PlannedWrite is one write planned by a DirectWriter, carried out in
// rounds of file I/O.
type PlannedWrite interface {
	// IOs are the current round's file I/Os; their buffers stay valid
	// until Step.
	IOs() []FileIO
	// Step takes the round's results (bytes or -errno, in the order of
	// IOs). more: the next round is in IOs. Otherwise the queue calls
	// Finish, from a worker when block is true (Finish may wait then).
	Step(res []int32) (more, block bool)
	// Finish ends the write and returns its error.
	Finish() error
}

// FileIO is one positional read or write of a file descriptor. A FUA
// write is durable when it completes (RWF_DSYNC).
type FileIO struct {
	Fd         int
	Buf        []byte
	Off        int64
	Write, FUA bool
}
