package volmgr

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/kernel/memberio"
)

// openMember opens a member device exclusively (O_EXCL on a block device:
// mkfs, mount, md and a second engine are refused while we hold it) with
// O_DIRECT (kernel/memberio: a write's error reaches the engine with its
// completion, before the request is acknowledged).
func openMember(path string, log *slog.Logger) (*memberio.Member, error) {
	m, err := memberio.Open(path, memberio.Options{Exclusive: true, Log: log})
	if err != nil {
		return nil, fmt.Errorf("open member %s exclusively: %w", path, err)
	}
	return m, nil
}

// openMemberWait is openMember, retried for up to memberBusyTimeout while
// the device is busy: the members of an engine that was just killed are
// released once the kernel has torn down its io_uring, asynchronously
// after the exit.
func openMemberWait(path string, log *slog.Logger) (*memberio.Member, error) {
	deadline := time.Now().Add(memberBusyTimeout)
	for {
		m, err := openMember(path, log)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return m, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const memberBusyTimeout = 10 * time.Second

// newExecutor returns the io_uring member executor, or, on a kernel where
// io_uring cannot be set up, the goroutine-per-I/O executor (logged).
func newExecutor(log *slog.Logger) engine.Executor {
	e, err := memberio.NewExecutor(memberio.ExecutorConfig{})
	if err != nil {
		log.Warn("io_uring member I/O unavailable; using one goroutine per member I/O", "err", err)
		return engine.ParallelExecutor{}
	}
	return e
}

// closeExecutor releases an executor's rings.
func closeExecutor(e engine.Executor) {
	if c, ok := e.(io.Closer); ok {
		c.Close()
	}
}

// assemble opens the members exclusively and assembles the volume with exec,
// owner-domain journaling for ownerDomain ("" off) and owner epoch epoch
// (0: one more than on disk).
func assemble(paths []string, ownerDomain string, epoch uint64, exec engine.Executor, log *slog.Logger) (*engine.Volume, error) {
	var devs []engine.Member
	for _, p := range paths {
		m, err := openMemberWait(p, log)
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			return nil, err
		}
		devs = append(devs, m)
	}
	return engine.Assemble(devs, paths, engine.Options{Logger: log, Executor: exec, OwnerDomain: ownerDomain, Epoch: epoch,
		IdleClean: idleClean})
}

// idleClean is how often an engine whose volume stopped being written
// cleans its write-intent bitmap (engine.Options.IdleClean): md's bitmap
// daemon_sleep default. A crash or a returning member then resyncs only
// the regions written in the last seconds, though the consumer never
// flushed; a volume being written pays nothing.
const idleClean = 5 * time.Second
