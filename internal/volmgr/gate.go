package volmgr

import (
	"errors"
	"fmt"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/assembly"
	"github.com/fabraid/fabraid/internal/volid"
)

// The start gate (boot-time assembly, docs/admin-guide.md "Boot").
// Reconcile starts the engine of a volume that has none only when
//
//   - this node owns the volume (Options.Owner; no hook: one node owns
//     everything). An owner check that fails (etcd unreachable) waits;
//   - and assembly.Decide says so: every expected member is present, or
//     the last-resort timeout (config assembly_timeout) has passed since
//     the volume's first member was seen and every group has at least K
//     in-sync members. With fewer it never starts.
//
// A volume whose recorded ublk device exists was started on this boot
// already (ublk devices do not survive a reboot): its engine runs and is
// adopted, or died and its device waits for user recovery. For it only the
// owner check applies, so a daemon or engine restart never waits for the
// timer. While a volume waits, Info shows state "waiting" and the reason,
// the journal gets the reason whenever the decision changes, and
// Options.Kick asks for a reconcile when the decision may change.

// WaitError is why the gate does not start a volume now.
type WaitError struct {
	Reason   string
	Geometry layout.Geometry // from the newest superblock; zero when unknown
}

func (e *WaitError) Error() string { return e.Reason }

// gatePoll bounds the time between two decisions while a volume waits
// within its timeout, so a member that appears late in the boot is seen
// soon (the periodic reconcile alone runs every 10 s).
const gatePoll = 2 * time.Second

// gate is the start gate's memory; guarded by Manager.op (reconcile).
type gate struct {
	firstSeen map[[16]byte]time.Time
	logged    map[[16]byte]string // last decision logged
	wakeAt    time.Time
	stopWake  func()
	now       func() time.Time                          // default time.Now
	afterFunc func(time.Duration, func()) (stop func()) // default time.AfterFunc
}

// mayStart says whether reconcile may start v's engine now. When not, the
// reason is recorded as the volume's error (Info: state "waiting").
func (m *Manager) mayStart(u [16]byte, v *onDisk) bool {
	err := m.gateCheck(u, v)
	if err == nil {
		return true
	}
	m.mu.Lock()
	m.errs[u] = err
	m.mu.Unlock()
	return false
}

func (m *Manager) gateCheck(u [16]byte, v *onDisk) error {
	g := &m.gate
	if g.firstSeen == nil {
		g.firstSeen, g.logged = map[[16]byte]time.Time{}, map[[16]byte]string{}
	}
	now := time.Now()
	if g.now != nil {
		now = g.now()
	}
	first, ok := g.firstSeen[u]
	if !ok {
		first = now
		g.firstSeen[u] = now
	}
	var geo layout.Geometry
	if v.sb != nil {
		geo = v.sb.Geometry
	}
	if m.opts.Owner != nil {
		mine, err := m.opts.Owner(u)
		if err != nil {
			return m.gateWait(u, v, "owner?", &WaitError{Geometry: geo,
				Reason: fmt.Sprintf("waiting: cannot tell whether this node owns the volume: %v", err)})
		}
		if !mine {
			return m.gateWait(u, v, "not owner", &WaitError{Geometry: geo, Reason: "not started here: another node owns the volume"})
		}
	}
	if m.recordedDevice(u) != "" {
		return nil
	}
	timeout := m.opts.Config.AssemblyTimeout
	if timeout <= 0 {
		timeout = assembly.DefaultTimeout
	}
	d := assembly.Decide(gateInput(v, first, now, timeout))
	key := fmt.Sprint(d.Action, d.Missing)
	switch d.Action {
	case assembly.Start:
		if g.logged[u] != "" && g.logged[u] != key {
			m.log.Info("volume complete; starting it", "volume", v.name, "why", d.Reason)
		}
		g.logged[u] = key
		return nil
	case assembly.StartDegraded:
		if g.logged[u] != key {
			m.log.Warn("volume starts degraded (last resort)", "volume", v.name, "why", d.Reason)
		}
		g.logged[u] = key
		return nil
	case assembly.Wait:
		g.arm(now, min(d.Retry, gatePoll), m.opts.Kick)
	case assembly.Refuse:
		if now.Sub(first) < timeout {
			g.arm(now, gatePoll, m.opts.Kick)
		}
	}
	return m.gateWait(u, v, key, &WaitError{Reason: d.Reason, Geometry: geo})
}

// gateWait logs w when the decision (key) changed and returns it.
func (m *Manager) gateWait(u [16]byte, v *onDisk, key string, w *WaitError) error {
	if m.gate.logged[u] != key {
		m.log.Warn("volume waits", "volume", v.name, "uuid", volid.Format(u), "why", w.Reason)
		m.gate.logged[u] = key
	}
	return w
}

// arm asks for kick in d, unless a wake-up at or before then is pending.
func (g *gate) arm(now time.Time, d time.Duration, kick func()) {
	if kick == nil || d <= 0 {
		return
	}
	at := now.Add(d)
	if g.wakeAt.After(now) && !g.wakeAt.After(at) {
		return
	}
	if g.stopWake != nil {
		g.stopWake()
	}
	after := g.afterFunc
	if after == nil {
		after = func(d time.Duration, f func()) func() { t := time.AfterFunc(d, f); return func() { t.Stop() } }
	}
	g.wakeAt, g.stopWake = at, after(d, kick)
}

// gateInput describes v's member slots as the newest superblock and the
// scan see them.
func gateInput(v *onDisk, first, now time.Time, timeout time.Duration) assembly.Input {
	in := assembly.Input{FirstSeen: first, Now: now, Timeout: timeout}
	if v.sb == nil {
		return in
	}
	in.Geometry = v.sb.Geometry
	for s, ms := range v.sb.Members {
		present := v.present[s]
		in.Slots = append(in.Slots, assembly.Slot{
			Member:   volid.Format(ms.UUID),
			Expected: (ms.Role == superblock.RoleActive || ms.Role == superblock.RoleRebuilding) && !(v.gone[s] && !present),
			Present:  present,
			InSync:   present && ms.Role == superblock.RoleActive,
		})
	}
	return in
}

// notRunningInfo is Info of a volume without a running engine: "waiting"
// with the gate's reason and the geometry it read, else "stopped".
func notRunningInfo(name string, u [16]byte, err error) api.Volume {
	in := api.Volume{Name: name, UUID: volid.Format(u), NQN: volid.NQN(u), State: "stopped", Error: err.Error()}
	var w *WaitError
	if errors.As(err, &w) {
		g := w.Geometry
		in.State, in.K, in.M, in.Groups, in.ChunkSize, in.Size = "waiting", g.K, g.M, g.Groups, g.ChunkSize, g.Size()
	}
	return in
}
