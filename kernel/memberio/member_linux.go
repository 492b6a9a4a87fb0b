//go:build linux

package memberio

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Options configure Open.
type Options struct {
	// Exclusive opens with O_EXCL: a block device is then refused while it
	// is mounted, in an md array or held by another engine.
	Exclusive bool
	// Buffered opens without O_DIRECT (tests and benchmarks of the buffered
	// path).
	Buffered bool
	// Log receives the reason when a member falls back to buffered I/O;
	// default slog.Default().
	Log *slog.Logger
	// Sysfs is where sysfs is mounted (Unreachable reads the block
	// device and its NVMe controllers there); default "/sys".
	Sysfs string
}

// Member is an engine.Member on a block device or file, opened with
// O_DIRECT where possible. It is safe for concurrent use.
type Member struct {
	f      *os.File
	fd     int
	path   string
	direct bool
	// align is the alignment of buffer addresses, offsets and lengths that
	// direct I/O needs (the logical block size, at least 512; addresses
	// are checked against a page when the device's block is smaller).
	align    int
	memAlign int
	size     int64

	// written counts completed writes; flushed is the value of written
	// when the last successful flush started (every write it counts had
	// completed before that flush, so it is durable).
	written, flushed atomic.Uint64
	stats            *Stats

	sysfs string
	sys   sysBlock // the block device in sysfs (zero for a file)
}

// Open opens path read-write as a member.
func Open(path string, o Options) (*Member, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open member: %w", err)
	}
	block := st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
	flags := os.O_RDWR | unix.O_CLOEXEC
	if o.Exclusive {
		flags |= os.O_EXCL
	}
	var f *os.File
	direct := false
	reason := "buffered I/O requested"
	if !o.Buffered {
		f, err = os.OpenFile(path, flags|unix.O_DIRECT, 0)
		switch {
		case err == nil:
			direct = true
		case errors.Is(err, unix.EINVAL) && !block:
			reason = "the file system does not support O_DIRECT"
		default:
			return nil, fmt.Errorf("open member %s with O_DIRECT: %w", path, err)
		}
	}
	if f == nil {
		if f, err = os.OpenFile(path, flags, 0); err != nil {
			return nil, fmt.Errorf("open member %s: %w", path, err)
		}
		log.Warn("member opened without O_DIRECT: writes go through the page cache and their errors show only at the next flush",
			"member", path, "reason", reason)
	}
	m := &Member{f: f, fd: int(f.Fd()), path: path, direct: direct, align: 4096, memAlign: 4096, stats: &Stats{},
		sysfs: cmp.Or(o.Sysfs, "/sys")}
	if block {
		m.sys = lookupSysBlock(m.sysfs, m.fd)
		lbs, err := unix.IoctlGetInt(m.fd, unix.BLKSSZGET)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("member %s: logical block size: %w", path, err)
		}
		m.align = max(lbs, 512)
		m.memAlign = max(m.align, 4096)
	}
	if m.size, err = f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("member %s: size: %w", path, err)
	}
	return m, nil
}

// Path returns the path the member was opened from.
func (m *Member) Path() string { return m.path }

// Direct reports whether the member was opened with O_DIRECT.
func (m *Member) Direct() bool { return m.direct }

// Size implements engine.Member.
func (m *Member) Size() (int64, error) { return m.size, nil }

// Close implements engine.Member.
func (m *Member) Close() error { return m.f.Close() }

// Stats returns the member's counters.
func (m *Member) Stats() *Stats { return m.stats }

// checkRange refuses what O_DIRECT cannot do: an unaligned offset or
// length.
func (m *Member) checkRange(n int, off int64) error {
	if m.direct && (off%int64(m.align) != 0 || n%m.align != 0) {
		return fmt.Errorf("member %s: %d bytes at %d: not aligned to the %d-byte block direct I/O needs: %w", m.path, n, off, m.align, unix.EINVAL)
	}
	return nil
}

// needsBounce reports whether p's address is unusable for direct I/O.
func (m *Member) needsBounce(p []byte) bool {
	return m.direct && len(p) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))%uintptr(m.memAlign) != 0
}

// ReadAt implements io.ReaderAt with one pread (used outside Executor
// batches: superblock and bitmap reads at assembly).
func (m *Member) ReadAt(p []byte, off int64) (int, error) {
	if err := m.checkRange(len(p), off); err != nil {
		return 0, err
	}
	buf := p
	if m.needsBounce(p) {
		buf = m.bounce(len(p))
	}
	n, err := preadFull(m.fd, buf, off)
	if len(buf) > 0 && &buf[0] != &p[0] {
		copy(p, buf[:n])
	}
	if err != nil {
		return n, fmt.Errorf("member %s: read %d bytes at %d: %w", m.path, len(p), off, err)
	}
	return n, nil
}

// WriteAt implements io.WriterAt with one pwrite.
func (m *Member) WriteAt(p []byte, off int64) (int, error) {
	n, err := m.write(p, off, pwriteFull, "write")
	if err == nil {
		m.written.Add(1)
	}
	return n, err
}

// WriteAtFUA implements engine.FUAWriter with one pwritev2(RWF_DSYNC):
// on a block device opened O_DIRECT that is a Force Unit Access write (or
// the block layer's write-then-flush where the device has no FUA), on a
// file a write and a sync of its range. The write does not count as
// unflushed.
func (m *Member) WriteAtFUA(p []byte, off int64) (int, error) {
	return m.write(p, off, pwriteDSync, "write (FUA)")
}

func (m *Member) write(p []byte, off int64, pwrite func(fd int, p []byte, off int64) (int, error), what string) (int, error) {
	if err := m.checkRange(len(p), off); err != nil {
		return 0, err
	}
	buf := p
	if m.needsBounce(p) {
		buf = m.bounce(len(p))
		copy(buf, p)
	}
	n, err := pwrite(m.fd, buf, off)
	if err != nil {
		return n, fmt.Errorf("member %s: %s %d bytes at %d: %w", m.path, what, len(p), off, err)
	}
	return n, nil
}

// Flush implements engine.Member: fdatasync, skipped when nothing was
// written since the last successful flush.
func (m *Member) Flush() error {
	gen, dirty := m.flushStart()
	if !dirty {
		return nil
	}
	if err := fdatasync(m.fd); err != nil {
		return fmt.Errorf("member %s: flush: %w", m.path, err)
	}
	m.flushDone(gen)
	return nil
}

// flushStart returns the write count a flush started now covers, and
// whether there is anything to flush.
func (m *Member) flushStart() (uint64, bool) {
	gen := m.written.Load()
	if gen == m.flushed.Load() {
		m.stats.FlushesSkipped.Add(1)
		return gen, false
	}
	m.stats.Flushes.Add(1)
	return gen, true
}

// flushDone records that every write counted in gen is durable.
func (m *Member) flushDone(gen uint64) {
	for {
		cur := m.flushed.Load()
		if cur >= gen || m.flushed.CompareAndSwap(cur, gen) {
			return
		}
	}
}

// bounce returns an aligned scratch buffer (rare: the engine's and ublk's
// buffers are aligned).
func (m *Member) bounce(n int) []byte {
	m.stats.Bounces.Add(1)
	b := make([]byte, n+m.memAlign)
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & uintptr(m.memAlign-1))
	return b[skip : skip+n]
}

func preadFull(fd int, p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Pread(fd, p[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, io.ErrUnexpectedEOF
		}
		done += n
	}
	return done, nil
}

func pwriteFull(fd int, p []byte, off int64) (int, error) {
	return pwriteLoop(p, off, func(p []byte, off int64) (int, error) { return unix.Pwrite(fd, p, off) })
}

func pwriteDSync(fd int, p []byte, off int64) (int, error) {
	return pwriteLoop(p, off, func(p []byte, off int64) (int, error) {
		return unix.Pwritev2(fd, [][]byte{p}, off, unix.RWF_DSYNC)
	})
}

// pwriteLoop writes all of p at off with pwrite, retrying EINTR and
// continuing after short writes.
func pwriteLoop(p []byte, off int64, pwrite func(p []byte, off int64) (int, error)) (int, error) {
	done := 0
	for done < len(p) {
		n, err := pwrite(p[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, io.ErrShortWrite
		}
		done += n
	}
	return done, nil
}

func fdatasync(fd int) error {
	for {
		err := unix.Fdatasync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}
