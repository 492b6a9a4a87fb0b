package volmgr

import (
	"context"
	"fmt"
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
//   - its engine freezes (the member I/O in flight completes, nothing more
//     is written by this node) and hands its held requests off: they
//     complete with a status the hosts retry, the retry meets the
//     inaccessible port and the hosts queue them for the new owner's path
//     (docs/nvmeof.md, "Which completion fails over"), so the drain waits
//     for no request and none waits for a host's I/O timeout;
//   - the engine flushes its members (a handed-off engine still runs
//     member flushes), so the new owner has nothing to resync;
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

// DrainEngine turns this node's export of volume u inaccessible, freezes
// its engine, hands its held requests off and flushes its members. The
// engine keeps running (frozen) and the export stays: the caller lists u
// in ClusterPlan.Drain from now on. It returns how long the engine took to
// drain once the export was inaccessible. An engine that cannot hand off
// (an engine binary older than the hand-off) keeps holding its requests:
// the hosts retry them at their I/O timeout.
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
	if err := e.Freeze(); err != nil {
		return time.Since(t0), fmt.Errorf("volume %s: drain: freeze: %w", name, err)
	}
	if err := e.HandOff(); err != nil {
		m.log.Warn("draining volume: hand-off refused; the frozen engine holds its requests (hosts retry them at their I/O timeout)",
			"volume", name, "err", err)
	}
	if err := e.Flush(); err != nil {
		// The consumers' own flushes made what they flushed durable;
		// this one only spares the new owner a resync.
		m.log.Warn("draining volume: flush failed", "volume", name, "err", err)
	}
	m.log.Info("volume drained: export inaccessible, engine frozen, requests handed off, members flushed", "volume", name,
		"seconds", time.Since(t0).Seconds())
	return time.Since(t0), nil
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
