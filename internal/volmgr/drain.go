package volmgr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// Draining an export (docs/cluster.md, "Planned move")
//
// A live owner that hands a volume to another node must not unlink its
// export while a consumer may have no other path: the Linux host deletes
// a controller at once when a live target answers its reconnect without
// the NQN, and I/O fails if that was the last path (docs/nvmeof.md,
// "Switchover"). So the old owner drains instead:
//
//   - its export's ANA state turns inaccessible: the hosts requeue new
//     I/O (nvmet answers ANA Inaccessible, a path error), none fails;
//   - it waits until the ublk device has no request in flight for a
//     while (commands nvmet accepted before the state change complete
//     normally), flushes the engine and freezes it: nothing more is
//     written by this node;
//   - the export stays linked and inaccessible (ClusterPlan.Drain) while
//     the new owner acquires, fences, assembles and exports, and is
//     removed only once the consumers have a live path to the new owner;
//     then the engine stops (export first: ublk's device deletion waits
//     until nvmet has released the block device).

// ConsumerPath is one controller of this host to a consumed volume.
type ConsumerPath struct {
	Address string // target address
	State   string // "live", "connecting", ...
}

// drainIdle is how long the ublk device of a draining volume must show
// no request in flight before its engine is frozen, and drainIdleTimeout
// how long DrainEngine waits for that at most (then it freezes anyway:
// requests still in flight are held, not failed).
const (
	drainIdle        = time.Second
	drainIdleTimeout = 30 * time.Second
	drainPoll        = 50 * time.Millisecond
)

// DrainEngine turns this node's export of volume u inaccessible, waits
// until its ublk device is idle, flushes the engine and freezes it. The
// engine keeps running (frozen) and the export stays: the caller lists u
// in ClusterPlan.Drain from now on. It returns how long the export has
// been inaccessible when the engine froze.
func (m *Manager) DrainEngine(ctx context.Context, u [16]byte) (time.Duration, error) {
	e := m.engineSnapshot()[u]
	if e == nil {
		return 0, fmt.Errorf("volume %s: drain: no engine on this node", volid.Format(u))
	}
	st, err := e.Status()
	if err != nil {
		return 0, fmt.Errorf("volume %s: drain: %w", volid.Format(u), err)
	}
	name := st.Engine.Name
	if err := m.SetANAState(ctx, u, ANAInaccessible); err != nil {
		return 0, fmt.Errorf("volume %s: drain: %w", name, err)
	}
	t0 := time.Now()
	idle, err := m.waitIdle(ctx, st.UblkPath)
	if err != nil {
		return time.Since(t0), fmt.Errorf("volume %s: drain: %w", name, err)
	}
	if !idle {
		m.log.Warn("draining volume: ublk device still busy; freezing anyway (the requests wait)", "volume", name,
			"ublk", st.UblkPath, "seconds", time.Since(t0).Seconds())
	}
	if err := e.Flush(); err != nil {
		// The consumers' own flushes made what they flushed durable;
		// this one only spares the new owner a resync.
		m.log.Warn("draining volume: flush failed", "volume", name, "err", err)
	}
	if err := e.Freeze(); err != nil {
		return time.Since(t0), fmt.Errorf("volume %s: drain: freeze: %w", name, err)
	}
	m.log.Info("volume drained: export inaccessible, engine flushed and frozen", "volume", name, "seconds", time.Since(t0).Seconds())
	return time.Since(t0), nil
}

// waitIdle waits until the block device dev has had no request in flight
// for drainIdle, at most drainIdleTimeout; false when it did not.
func (m *Manager) waitIdle(ctx context.Context, dev string) (bool, error) {
	path := filepath.Join(m.opts.Sysfs, "class", "block", filepath.Base(dev), "inflight")
	deadline := time.Now().Add(drainIdleTimeout)
	var since time.Time
	for {
		busy, err := inflight(path)
		if err != nil {
			return false, err
		}
		now := time.Now()
		switch {
		case busy:
			since = time.Time{}
		case since.IsZero():
			since = now
		case now.Sub(since) >= drainIdle:
			return true, nil
		}
		if now.After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// inflight reads a block device's inflight file ("reads writes").
func inflight(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("requests in flight: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false, fmt.Errorf("requests in flight: %s: %q", path, b)
	}
	return f[0] != "0" || f[1] != "0", nil
}

// Exported reports whether the last reconcile applied an export of
// volume u on this node.
func (m *Manager) Exported(u [16]byte) bool {
	x := m.x
	x.lastMu.Lock()
	defer x.lastMu.Unlock()
	return slices.ContainsFunc(x.applied, func(e backend.Export) bool { return e.NQN == volid.NQN(u) })
}

// noteExported records an applied export spec.
func (x *exporter) noteExported(exports []backend.Export) {
	x.lastMu.Lock()
	defer x.lastMu.Unlock()
	x.applied = slices.Clone(exports)
}

// notePaths records this host's controllers by subsystem NQN.
func (x *exporter) notePaths(ctrls []nvmf.Controller) {
	x.lastMu.Lock()
	defer x.lastMu.Unlock()
	x.paths = map[string][]ConsumerPath{}
	for _, c := range ctrls {
		if strings.HasPrefix(c.SubsystemNQN, volid.NQNPrefix) {
			x.paths[c.SubsystemNQN] = append(x.paths[c.SubsystemNQN], ConsumerPath{Address: c.Address.TrAddr, State: c.State})
		}
	}
}

// consumerPaths are the controllers of the consumed volumes cs the last
// reconcile found.
func (m *Manager) consumerPaths(cs []Consumer) map[[16]byte][]ConsumerPath {
	x := m.x
	x.lastMu.Lock()
	defer x.lastMu.Unlock()
	out := map[[16]byte][]ConsumerPath{}
	for _, c := range cs {
		out[c.UUID] = append([]ConsumerPath(nil), x.paths[volid.NQN(c.UUID)]...)
	}
	return out
}
