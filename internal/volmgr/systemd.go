package volmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/coreos/go-systemd/v22/util"

	"github.com/fabraid/fabraid/internal/volid"
)

// Engines as systemd units
//
// With SystemdStarter every volume's engine runs as the systemd unit
// fabraid-engine@<volume>.service (EngineUnitTemplate), started over D-Bus.
// The daemon writes the engine spec file (see SpecFile), asks systemd to
// start the unit and waits for the job, which ends when the engine has sent
// READY=1; then it talks to the engine over its socket as it does with a
// child. systemd, not the daemon, restarts a crashed engine (Restart=
// on-failure); the new engine reads the spec and re-attaches to the same
// ublk device with user recovery. The units are not bound to fabraidd, so
// they keep running while the daemon stops or restarts.

// How long to wait for systemd's start and stop jobs: the unit's own
// timeouts (TimeoutStartSec=120, TimeoutStopSec=90) end them first.
const (
	unitStartTimeout = 150 * time.Second
	unitStopTimeout  = 120 * time.Second
)

// systemdConn is a D-Bus connection to systemd, made on first use and
// made again when it drops.
type systemdConn struct {
	mu   sync.Mutex
	conn *sddbus.Conn
}

// connectSystemd connects to systemd through the system bus, or through
// systemd's private socket when there is no bus (dbus-daemon not running).
func connectSystemd(ctx context.Context) (*sddbus.Conn, error) {
	c, err := sddbus.NewSystemConnectionContext(ctx)
	if err == nil {
		return c, nil
	}
	c, perr := sddbus.NewSystemdConnectionContext(ctx)
	if perr != nil {
		return nil, fmt.Errorf("system bus: %v; systemd's private socket: %w", err, perr)
	}
	return c, nil
}

func (s *systemdConn) get(ctx context.Context) (*sddbus.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	c, err := connectSystemd(ctx)
	if err != nil {
		return nil, err
	}
	s.conn = c
	return c, nil
}

// ProbeSystemd finds out whether engines can run as systemd units: systemd
// is PID 1 and loads an instance of EngineUnitTemplate.
func ProbeSystemd(ctx context.Context) SystemdProbe {
	p := SystemdProbe{Booted: util.IsRunningSystemd()}
	if !p.Booted {
		return p
	}
	c, err := connectSystemd(ctx)
	if err != nil {
		p.Err = err
		return p
	}
	defer c.Close()
	// Reading a property of an instance makes systemd load it: LoadState
	// says whether the template exists and parses.
	st, err := unitProperty(ctx, c, EngineUnit("probe"), "LoadState")
	if err != nil {
		p.Err = err
		return p
	}
	p.TemplateLoadState = st
	return p
}

// unitProperty reads a string property of unit's Unit interface.
func unitProperty(ctx context.Context, c *sddbus.Conn, unit, name string) (string, error) {
	prop, err := c.GetUnitPropertyContext(ctx, unit, name)
	if err != nil {
		return "", fmt.Errorf("%s: read %s: %w", unit, name, err)
	}
	v, ok := prop.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("%s: %s is %s, not a string", unit, name, prop.Value.Signature())
	}
	return v, nil
}

// unitFailure describes why a unit's job did not end in "done", from the
// service's Result and main process status, for error messages.
func unitFailure(ctx context.Context, c *sddbus.Conn, unit string) string {
	props, err := c.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (result %v, main process exit status %v; journalctl -u %s)", props["Result"], props["ExecMainStatus"], unit)
}

// runJob runs a start or stop job and waits for its result.
func runJob(ctx context.Context, c *sddbus.Conn, unit, what string, timeout time.Duration,
	enqueue func(context.Context, string, string, chan<- string) (int, error)) error {
	ch := make(chan string, 1)
	if _, err := enqueue(ctx, unit, "replace", ch); err != nil {
		return fmt.Errorf("volmgr: %s %s: %w", what, unit, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("volmgr: %s %s: job %s%s", what, unit, res, unitFailure(ctx, c, unit))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("volmgr: %s %s: %w", what, unit, ctx.Err())
	case <-t.C:
		return fmt.Errorf("volmgr: %s %s: no job result within %v", what, unit, timeout)
	}
}

// SystemdStarter starts engines as systemd units (EngineUnitTemplate)
// over D-Bus. An engine already serving the volume (its socket answers
// with this UUID) is adopted without a restart. A unit in the failed state
// (its restart limit was hit) is reset and started again, with an error
// logged. Stop on the returned Engine stops the unit and removes the spec
// file. The daemon never runs these engines as its own children.
func SystemdStarter(runDir string, log *slog.Logger) StartFunc {
	sc := &systemdConn{}
	return func(ctx context.Context, s EngineSpec) (Engine, error) {
		return sc.start(ctx, runDir, s, log)
	}
}

func (sc *systemdConn) start(ctx context.Context, runDir string, s EngineSpec, log *slog.Logger) (Engine, error) {
	unit := EngineUnit(s.Name)
	if err := volid.CheckName(s.Name); err != nil {
		return nil, fmt.Errorf("volmgr: start %s: %w (use engine_mode = process for this volume's node)", unit, err)
	}
	c, err := sc.get(ctx)
	if err != nil {
		return nil, fmt.Errorf("volmgr: start %s: connect to systemd: %w", unit, err)
	}
	sock := EngineSocket(runDir, s.UUID)
	ch := newChildProto(sock, daemonProtocols, func(EngineVersion) string {
		return fmt.Sprintf("`systemctl restart %s`", unit)
	})
	specPath := SpecPath(runDir, s.Name)
	ue := &unitEngine{child: ch, unit: unit, spec: specPath, sc: sc}
	st, err := ch.Status()
	if errors.Is(err, ErrEngineProtocol) {
		return nil, fmt.Errorf("volume %s: %w", s.Name, err)
	}
	if err == nil && st.Engine.UUID == s.UUID {
		owner, err := c.GetUnitNameByPID(ctx, uint32(st.PID))
		if err == nil && owner == unit {
			log.Info("adopted engine unit", "volume", s.Name, "unit", unit, "pid", st.PID, "ublk", st.UblkPath)
			return ue, nil
		}
		// An engine started as a child (engine_mode was process): it
		// serves the volume, so keep it; when it exits, the next reconcile
		// starts the unit, which re-attaches to its ublk device.
		log.Warn("adopted engine that runs outside its unit", "volume", s.Name, "unit", unit, "pid", st.PID, "runs_in", owner, "err", err)
		return ch, nil
	}
	state, err := unitProperty(ctx, c, unit, "ActiveState")
	if err != nil {
		return nil, fmt.Errorf("volmgr: start %s: %w", unit, err)
	}
	if state == "failed" {
		log.Error("engine unit failed (restart limit hit?); resetting and starting it again", "volume", s.Name, "unit", unit,
			"why", unitFailure(ctx, c, unit))
		if err := c.ResetFailedUnitContext(ctx, unit); err != nil {
			return nil, fmt.Errorf("volmgr: reset-failed %s: %w", unit, err)
		}
	}
	if err := WriteSpec(specPath, mergeSpec(specPath, specFile(s, sock))); err != nil {
		return nil, fmt.Errorf("volmgr: start %s: %w", unit, err)
	}
	t0 := time.Now()
	if err := runJob(ctx, c, unit, "start", unitStartTimeout, c.StartUnitContext); err != nil {
		return nil, err
	}
	// READY=1 comes once the socket answers; the loop covers a unit that
	// was already active (its job is done at once) but not answering yet.
	for i := 0; ; i++ {
		st, err := ch.Status()
		if err == nil && st.Engine.UUID == s.UUID {
			log.Info("engine unit started", "volume", s.Name, "unit", unit, "pid", st.PID, "ublk", st.UblkPath,
				"seconds", time.Since(t0).Seconds())
			return ue, nil
		}
		if i == 100 {
			return nil, fmt.Errorf("volmgr: start %s: active, but %s does not answer: %v", unit, sock, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("volmgr: start %s: %w", unit, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// specFile is the spec file of s's engine unit, answering on sock.
func specFile(s EngineSpec, sock string) SpecFile {
	return SpecFile{UUID: volid.Format(s.UUID), Name: s.Name, Members: s.Members, UblkID: s.UblkID, Socket: sock, OwnerDomain: s.OwnerDomain, Epoch: s.Epoch, NoZeroCopy: s.NoZeroCopy,
		RebuildBusyRate: s.RebuildBusyRate}
}

// mergeSpec returns want, except that the ublk device id of the spec file
// at path is kept when it names the same volume: the engine records the id
// of the device it created there, and the daemon's own record may be
// older.
func mergeSpec(path string, want SpecFile) SpecFile {
	if old, err := ReadSpec(path); err == nil && old.UUID == want.UUID && old.UblkID >= 0 {
		want.UblkID = old.UblkID
	}
	return want
}

// unitEngine is an engine run by a systemd unit, reached through its
// socket.
type unitEngine struct {
	*child
	unit string
	spec string
	sc   *systemdConn
}

// Stop stops the unit (the engine stops the ublk device and closes the
// volume cleanly on SIGTERM), waits for it and removes the spec file.
func (u *unitEngine) Stop() error {
	ctx := context.Background()
	c, err := u.sc.get(ctx)
	if err != nil {
		return fmt.Errorf("volmgr: stop %s: connect to systemd: %w", u.unit, err)
	}
	if err := runJob(ctx, c, u.unit, "stop", unitStopTimeout, c.StopUnitContext); err != nil {
		return err
	}
	// A non-zero exit on the way down leaves the unit failed; the volume
	// is gone, so is that state.
	if st, err := unitProperty(ctx, c, u.unit, "ActiveState"); err == nil && st == "failed" {
		if err := c.ResetFailedUnitContext(ctx, u.unit); err != nil {
			return fmt.Errorf("volmgr: reset-failed %s: %w", u.unit, err)
		}
	}
	return RemoveSpec(u.spec)
}
