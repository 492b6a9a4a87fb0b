//go:build !linux

package memberio

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/kernel/uring"
)

// Options configure Open.
type Options struct {
	Exclusive, Buffered bool
	Log                 *slog.Logger
}

// Member is a Linux-only member.
type Member struct{ engine.FileMember }

// Open fails: O_DIRECT member I/O exists only on Linux.
func Open(path string, o Options) (*Member, error) {
	return nil, fmt.Errorf("member I/O on %s: %w (requires Linux)", runtime.GOOS, uring.ErrNotSupported)
}

// ExecutorConfig tunes an Executor.
type ExecutorConfig struct {
	Entries      uint32
	MaxIdleRings int
}

// Executor is a Linux-only executor.
type Executor struct{ engine.SyncExecutor }

// NewExecutor fails: io_uring exists only on Linux.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	return nil, fmt.Errorf("member I/O on %s: %w (requires Linux)", runtime.GOOS, uring.ErrNotSupported)
}

// Close does nothing.
func (e *Executor) Close() error { return nil }
