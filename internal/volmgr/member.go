package volmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/engine"
)

// openMember opens a member device exclusively (O_EXCL on a block device:
// mkfs, mount, md and a second engine are refused while we hold it).
func openMember(path string) (*engine.FileMember, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_EXCL, 0)
	if err != nil {
		return nil, fmt.Errorf("open member %s exclusively: %w", path, err)
	}
	return engine.NewFileMember(f), nil
}

// openMemberWait is openMember, retried for up to memberBusyTimeout while
// the device is busy: the members of an engine that was just killed are
// released once the kernel has torn down its io_uring, asynchronously
// after the exit.
func openMemberWait(path string) (*engine.FileMember, error) {
	deadline := time.Now().Add(memberBusyTimeout)
	for {
		m, err := openMember(path)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return m, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const memberBusyTimeout = 10 * time.Second

// assemble opens the members exclusively and assembles the volume.
func assemble(paths []string, log *slog.Logger) (*engine.Volume, error) {
	var devs []engine.Member
	for _, p := range paths {
		m, err := openMemberWait(p)
		if err != nil {
			for _, d := range devs {
				d.(*engine.FileMember).Close()
			}
			return nil, err
		}
		devs = append(devs, m)
	}
	return engine.Assemble(devs, paths, engine.Options{Logger: log})
}
