//go:build linux

package memberio

import (
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"golang.org/x/sys/unix"
)

// errnoMember is a Member whose I/O fails with errno (wrapped as the
// Executor wraps it) once broken is set.
type errnoMember struct {
	*Member
	errno  unix.Errno
	broken atomic.Bool
}

func (e *errnoMember) fail(op string, n int, off int64) error {
	return fmt.Errorf("member %s: %s %d bytes at %d: %w", e.path, op, n, off, e.errno)
}

func (e *errnoMember) ReadAt(p []byte, off int64) (int, error) {
	if e.broken.Load() {
		return 0, e.fail("read", len(p), off)
	}
	return e.Member.ReadAt(p, off)
}

func (e *errnoMember) WriteAt(p []byte, off int64) (int, error) {
	if e.broken.Load() {
		return 0, e.fail("write", len(p), off)
	}
	return e.Member.WriteAt(p, off)
}

func (e *errnoMember) WriteAtFUA(p []byte, off int64) (int, error) {
	if e.broken.Load() {
		return 0, e.fail("write", len(p), off)
	}
	return e.Member.WriteAtFUA(p, off)
}

func (e *errnoMember) Flush() error {
	if e.broken.Load() {
		return fmt.Errorf("member %s: flush: %w", e.path, e.errno)
	}
	return e.Member.Flush()
}

// The engine records a member whose I/O fails with an errno of a gone
// device or path (ENOLINK, ENODEV, ENXIO, ESHUTDOWN) as unreachable, and
// one that fails with any other (EIO of the media, ENOSPC, EBADF) as an
// I/O error: it asks the Member (Unreachable), which for a regular file has
// no controller or sysfs device to look at.
func TestUnreachableErrnos(t *testing.T) {
	for _, tc := range []struct {
		errno unix.Errno
		want  superblock.FailReason
	}{
		{unix.ENOLINK, superblock.FailUnreachable},
		{unix.ENODEV, superblock.FailUnreachable},
		{unix.ENXIO, superblock.FailUnreachable},
		{unix.ESHUTDOWN, superblock.FailUnreachable},
		{unix.EIO, superblock.FailIO},
		{unix.ENOSPC, superblock.FailIO},
		{unix.EBADF, superblock.FailIO},
	} {
		t.Run(unix.ErrnoName(tc.errno), func(t *testing.T) {
			ms := memberFiles(t, t.TempDir(), 3, 4<<20)
			bad := &errnoMember{Member: ms[1], errno: tc.errno}
			vol, err := engine.Create(engine.Config{Name: "errno", K: 2, M: 1, AssumeZeroed: true},
				[]engine.Member{ms[0], bad, ms[2]}, []string{"m0", "m1", "m2"}, engine.Options{Logger: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			defer vol.Close()
			bad.broken.Store(true)
			if _, err := vol.WriteAt(engine.AlignedBuffer(64<<10), 0); err != nil {
				t.Fatal(err)
			}
			if st := vol.Status().Members[1]; st.Role != superblock.RoleFailed || st.Failure != tc.want {
				t.Fatalf("member failing with %v: %s (%s), want failed (%s)", tc.errno, st.Role, st.Failure, tc.want)
			}
		})
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
