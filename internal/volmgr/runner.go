package volmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/kernel/memberio"
	"github.com/fabraid/fabraid/kernel/ublk"
)

// Engine is one running volume engine serving a ublk device.
type Engine interface {
	// Status is the engine's view of the volume plus background tasks.
	Status() (EngineStatus, error)
	// Fail marks slot failed by administrator request; unless force, a
	// fail that would lose a group is refused before anything changes.
	Fail(slot int, force bool) error
	// Replace puts the device at path into failed slot and starts a rebuild.
	Replace(slot int, path string, rate int64) error
	// ReAdd puts the device at path, which holds the failed member of
	// slot, back into it and starts the rebuild of what it missed.
	ReAdd(slot int, path string, rate int64) error
	// Rebuild starts a rebuild of stale or replaced members in the background.
	Rebuild(rate int64) error
	// Scrub starts a parity check (repairing mismatches when repair) in the
	// background.
	Scrub(repair bool, rate int64) error
	// Flush makes every write the engine completed durable on its
	// members (engine.Volume.Flush).
	Flush() error
	// Freeze stops all member I/O (engine.Volume.Freeze: the owner's
	// self-fence); requests stay queued, nothing is acknowledged.
	Freeze() error
	// Thaw resumes a frozen engine under a newer owner epoch
	// (engine.Volume.Thaw: refused for good when another owner ran the
	// volume meanwhile).
	Thaw(epoch uint64) error
	// HandOff gives a frozen engine's held and later requests back to the
	// initiator (engine.Volume.HandOff) until a Thaw; only after every
	// port exporting the volume shows it inaccessible.
	HandOff() error
	// Stop stops the ublk device and closes the volume cleanly.
	Stop() error
}

// EngineStatus is what an engine reports.
type EngineStatus struct {
	Engine    engine.Status   `json:"engine"`
	UblkID    int             `json:"ublk_id"`
	UblkPath  string          `json:"ublk_path"`
	PID       int             `json:"pid"`
	Task      string          `json:"task,omitempty"` // "rebuild" or "scrub" while one runs
	LastTask  *api.TaskResult `json:"last_task,omitempty"`
	StartedAt time.Time       `json:"started_at"`
	// IO are the volume's request counters since the engine started.
	IO engine.IOStats `json:"io"`
	// Frozen: the engine issues no member I/O (Freeze) until a Thaw.
	Frozen bool `json:"frozen,omitempty"`
	// HandedOff: the frozen engine hands its requests off (HandOff).
	HandedOff bool `json:"handed_off,omitempty"`
	// ZeroCopy: the ublk device reads zero copy (ublk.Device.ZeroCopy).
	ZeroCopy bool `json:"zero_copy,omitempty"`
}

// ErrBusy is returned when a background task is already running.
var ErrBusy = errors.New("a rebuild or scrub is already running")

// Local runs an engine and its ublk device in this process. Its methods are
// safe for concurrent use.
type Local struct {
	vol     *engine.Volume
	exec    engine.Executor
	dev     *ublk.Device
	ctl     *ublk.Control
	started time.Time
	log     *slog.Logger
	tasks   tasks
	// busyRate is LocalOptions.RebuildBusyRate.
	busyRate int64
}

// LocalOptions tune how a Local serves its volume.
type LocalOptions struct {
	// Executor is the volume's member executor (the Local closes it when
	// it stops, if it is an io.Closer).
	Executor engine.Executor
	// Queues is the number of ublk queues, each with its own thread and
	// ring; 0 means one per CPU the process may run on (its affinity, which
	// a systemd unit's CPUAffinity= or a cpuset sets).
	Queues int
	// Depth is the number of requests in flight per queue (default 128).
	Depth int
	// NoZeroCopy keeps the copy path where the kernel offers zero copy
	// (ublk.Config.NoZeroCopy).
	NoZeroCopy bool
	// RebuildBusyRate is engine.RebuildOptions.BusyRate of the rebuilds
	// and scrubs the Local runs (0: none).
	RebuildBusyRate int64
}

// ublkConfig is the device configuration for a volume with geometry g:
// async serving (many requests in flight per queue, each waiting on its
// member I/O), requests of at least one full stripe (so that large writes
// reach the engine as full-stripe writes; at least 1 MiB), 4 KiB blocks,
// chunk and stripe as minimum and optimal I/O size. The device advertises
// a volatile write cache with FUA (kernel/ublk), so file systems send
// flushes and FUA writes.
func ublkConfig(ublkID, blockSize int, g layout.Geometry, o LocalOptions) *ublk.Config {
	queues := o.Queues
	if queues <= 0 {
		queues = runtime.NumCPU()
	}
	stripe := int(g.StripeBytes())
	maxIO := max(1<<20, stripe)
	maxIO = (maxIO + stripe - 1) / stripe * stripe
	return &ublk.Config{ID: ublkID, Queues: queues, Depth: o.Depth, Async: true, MaxIOBytes: maxIO,
		LogicalBlockSize: blockSize, IOMin: g.ChunkSize, IOOpt: stripe, NoZeroCopy: o.NoZeroCopy}
}

// StartLocal serves vol as a ublk device: it re-attaches to device ublkID
// when that device exists and has lost its server (user recovery), else it
// creates a device, with id ublkID when free (ublk.AnyID: any).
func StartLocal(vol *engine.Volume, ublkID int, log *slog.Logger, o LocalOptions) (*Local, error) {
	ctl, err := ublk.OpenControl()
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", vol.Name(), err)
	}
	ok := false
	defer func() {
		if !ok {
			ctl.Close()
		}
	}()
	g := vol.Geometry()
	cfg := ublkConfig(ublkID, vol.BlockSize(), g, o)
	// Healthy reads are submitted by the queue threads themselves.
	backend := memberio.Backend{Volume: vol}
	if want := cfg.Queues + 2; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want) // see fabraid ublk serve: an idle P per queue thread
	}
	var dev *ublk.Device
	if ublkID >= 0 {
		if info, err := ctl.Info(ublkID); err == nil {
			info = awaitServerExit(ctl, info, log)
			if info.State != ublk.StateQuiesced && info.State != ublk.StateDead {
				return nil, fmt.Errorf("volume %s: ublk device %d is %s (served by pid %d)", vol.Name(), ublkID, info.State, info.PID)
			}
			dev, err = ublk.Recover(ctl, ublkID, backend, cfg)
			if err != nil {
				return nil, fmt.Errorf("volume %s: recover ublk device %d: %w", vol.Name(), ublkID, err)
			}
			log.Info("re-attached ublk device (user recovery)", "volume", vol.Name(), "ublk", dev.BlockPath())
		}
	}
	if dev == nil {
		dev, err = ublk.Create(ctl, backend, cfg)
		if err != nil && ublkID >= 0 {
			cfg.ID = ublk.AnyID
			dev, err = ublk.Create(ctl, backend, cfg)
		}
		if err != nil {
			return nil, fmt.Errorf("volume %s: create ublk device: %w", vol.Name(), err)
		}
		log.Info("created ublk device", "volume", vol.Name(), "ublk", dev.BlockPath())
	}
	ok = true // the device uses ctl until it is closed
	log.Info("serving", "volume", vol.Name(), "queues", cfg.Queues, "depth", dev.Depth(), "max_io_bytes", cfg.MaxIOBytes,
		"zero_copy", dev.ZeroCopy())
	return &Local{vol: vol, exec: o.Executor, dev: dev, ctl: ctl, started: time.Now(), log: log,
		tasks: tasks{volume: vol.Name(), log: log}, busyRate: o.RebuildBusyRate}, nil
}

// serverExitTimeout bounds how long a new engine waits for the kernel to
// notice that the previous server of its ublk device is gone.
const serverExitTimeout = 10 * time.Second

// awaitServerExit waits while the device is live but its server process
// has exited: the kernel quiesces the device only once the dead server's
// io_uring is torn down, which happens asynchronously after the exit, and a
// new engine started at once (systemd's RestartSec=100ms) can be faster.
// It returns the device's latest info.
func awaitServerExit(ctl *ublk.Control, info *ublk.DevInfo, log *slog.Logger) *ublk.DevInfo {
	deadline := time.Now().Add(serverExitTimeout)
	if info.State == ublk.StateLive && !processAlive(info.PID) {
		log.Info("waiting for the kernel to release the previous server", "ublk", info.ID, "pid", info.PID)
	}
	for info.State == ublk.StateLive && !processAlive(info.PID) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		next, err := ctl.Info(info.ID)
		if err != nil {
			break
		}
		info = next
	}
	return info
}

// processAlive reports whether pid is a running process (not a zombie).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// Volume returns the engine volume.
func (l *Local) Volume() *engine.Volume { return l.vol }

// Device returns the ublk device.
func (l *Local) Device() *ublk.Device { return l.dev }

// Status implements Engine.
func (l *Local) Status() (EngineStatus, error) {
	task, last := l.tasks.current()
	return EngineStatus{Engine: l.vol.Status(), UblkID: l.dev.ID(), UblkPath: l.dev.BlockPath(), ZeroCopy: l.dev.ZeroCopy(), PID: pid(), Task: task, LastTask: last, StartedAt: l.started, IO: l.vol.IOStats(), Frozen: l.vol.Frozen(), HandedOff: l.vol.HandedOff()}, nil
}

// Flush implements Engine.
func (l *Local) Flush() error {
	if err := l.vol.Flush(); err != nil {
		return fmt.Errorf("volume %s: flush: %w", l.vol.Name(), err)
	}
	return nil
}

// Freeze implements Engine.
func (l *Local) Freeze() error {
	l.vol.Freeze()
	return nil
}

// Thaw implements Engine.
func (l *Local) Thaw(epoch uint64) error {
	if err := l.vol.Thaw(epoch); err != nil {
		return fmt.Errorf("volume %s: %w", l.vol.Name(), err)
	}
	return nil
}

// HandOff implements Engine.
func (l *Local) HandOff() error {
	if err := l.vol.HandOff(); err != nil {
		return fmt.Errorf("volume %s: hand off: %w", l.vol.Name(), err)
	}
	return nil
}

// Fail implements Engine.
func (l *Local) Fail(slot int, force bool) error {
	fail := l.vol.FailMember
	if force {
		fail = l.vol.ForceFailMember
	}
	err := fail(slot)
	switch {
	case errors.Is(err, engine.ErrWouldLoseGroup):
		return fmt.Errorf("volume %s: %w (force fails it anyway, and the volume fails)", l.vol.Name(), err)
	case err != nil:
		return fmt.Errorf("volume %s: fail slot %d: %w", l.vol.Name(), slot, err)
	}
	return nil
}

// ReAdd implements Engine.
func (l *Local) ReAdd(slot int, path string, rate int64) error {
	return l.changeMember("re-add", rate, func() error {
		if st := l.vol.Status(); slot >= 0 && slot < len(st.Members) && st.Members[slot].Device == path {
			// Failed while this engine ran: it still holds the device
			// (exclusively); let go of it first.
			if err := l.vol.DetachFailed(slot); err != nil {
				return fmt.Errorf("volume %s: re-add %s: %w", l.vol.Name(), path, err)
			}
		}
		m, err := openMember(path, l.log)
		if err != nil {
			return fmt.Errorf("volume %s: re-add %s: %w", l.vol.Name(), path, err)
		}
		if err := l.vol.ReAdd(m, path); err != nil {
			m.Close()
			return fmt.Errorf("volume %s: %w", l.vol.Name(), err)
		}
		return nil
	})
}

// Replace implements Engine.
func (l *Local) Replace(slot int, path string, rate int64) error {
	return l.changeMember("replace", rate, func() error {
		m, err := openMember(path, l.log)
		if err != nil {
			return fmt.Errorf("volume %s: replace slot %d: %w", l.vol.Name(), slot, err)
		}
		if err := l.vol.Replace(slot, m, path); err != nil {
			m.Close()
			return fmt.Errorf("volume %s: replace slot %d with %s: %w", l.vol.Name(), slot, path, err)
		}
		return nil
	})
}

// changeMember makes a member rebuilding with change and starts the
// rebuild. A rebuild that runs is stopped first and the new one covers
// its targets and the new member in one pass (tasks.makeRoom); when change
// fails, the stopped rebuild is started again. A running scrub makes it
// fail with ErrBusy.
func (l *Local) changeMember(what string, rate int64, change func() error) error {
	rate, stopped, err := l.tasks.makeRoom(what, rate)
	if err != nil {
		return err
	}
	if err := change(); err != nil {
		if stopped {
			if rerr := l.Rebuild(rate); rerr != nil {
				l.log.Warn("could not resume the stopped rebuild", "volume", l.vol.Name(), "err", rerr)
			}
		}
		return err
	}
	return l.Rebuild(rate)
}

// Rebuild implements Engine.
func (l *Local) Rebuild(rate int64) error {
	return l.tasks.start("rebuild", rate, func(ctx context.Context) (*engine.ScrubReport, error) {
		return nil, l.vol.Rebuild(ctx, engine.RebuildOptions{Rate: rate, BusyRate: l.busyRate})
	})
}

// Scrub implements Engine.
func (l *Local) Scrub(repair bool, rate int64) error {
	return l.tasks.start("scrub", 0, func(ctx context.Context) (*engine.ScrubReport, error) {
		r, err := l.vol.Scrub(ctx, repair, engine.RebuildOptions{Rate: rate, BusyRate: l.busyRate})
		return &r, err
	})
}

// Stop implements Engine: it cancels a running task, stops the ublk device and
// closes the volume cleanly.
//
// A frozen volume is closed first (nothing is written to its members; the
// requests held at its gate fail with engine.ErrClosed), since stopping
// the ublk device waits for the requests in flight, which a frozen volume
// never completes. The volume exports are removed before (the manager
// unexports first), so no consumer sees those errors through this node.
func (l *Local) Stop() error {
	if l.vol.Frozen() {
		// Before the task: a rebuild or scrub held at the frozen gate
		// returns only once the close fails its held I/O.
		l.vol.Close()
	}
	l.tasks.stop()
	err := l.dev.Close()
	l.ctl.Close()
	if cerr := l.vol.Close(); err == nil && !errors.Is(cerr, engine.ErrClosed) {
		err = cerr
	}
	closeExecutor(l.exec)
	if err != nil {
		return fmt.Errorf("volume %s: stop: %w", l.vol.Name(), err)
	}
	return nil
}

// Abandon leaves the ublk device for user recovery (as a crash would) and
// drops the volume without a clean stop: used when the daemon exits and
// the volume should stay (a restarted daemon re-attaches).
func (l *Local) Abandon() {
	l.tasks.stop()
	l.vol.Abandon()
}
