package volmgr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/volid"
)

// Ownership in cluster mode
//
// A node runs a volume's engine only while it holds the volume's owner
// key (package owner) at an epoch E; the daemon plans exactly those
// volumes (PlannedVolume.Epoch = E) and lists every other volume it knows
// in ClusterPlan.Stop. Invariants the Manager keeps:
//
//   - an engine starts only for a planned volume, assembled at its
//     planned epoch (EngineSpec.Epoch -> engine.Options.Epoch);
//   - a running engine at another epoch than the planned one (adopted
//     after a daemon restart, or frozen by a self-fence and now held
//     again under a new lease) is frozen and thawed at the planned epoch:
//     Thaw re-reads every superblock and refuses for good when another
//     owner ran the volume meanwhile; such an engine is stopped;
//   - the engine of a volume in Stop loses its export first (so no
//     consumer is served by it) and is stopped then; a frozen one loses
//     only its port links first, then stops, then loses the rest of its
//     export (fencestop.go);
//   - FreezeAll (the owner session's self-fence) freezes every engine
//     without waiting for any lock a reconcile may hold.

// FreezeAll freezes every running engine (engine.Volume.Freeze: no member
// I/O, nothing acknowledged). It takes no lock a reconcile holds across
// an engine call, so it can run while one is stuck.
//
// Then, in the background, each frozen engine's export turns
// ANA-inaccessible on every export address, and once it is, the engine
// hands its held requests off (handOffFrozen).
func (m *Manager) FreezeAll() error {
	var errs []error
	frozen := map[[16]byte]Engine{}
	for u, e := range m.engineSnapshot() {
		if err := e.Freeze(); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: freeze: %w", volid.Format(u), err))
			continue
		}
		frozen[u] = e
	}
	if len(frozen) > 0 {
		go m.handOffFrozen(frozen)
	}
	return errors.Join(errs...)
}

// handOffFrozen makes the requests the frozen engines hold reach another
// path now rather than at the hosts' I/O timeout (30 s, then a controller
// reset). First each export turns inaccessible, so that the hosts send
// this node no new command and refuse a retried one with ANA Inaccessible
// (a failover); then its engine hands its requests off: they complete
// with a status the host retries, the retry is refused, and the host
// moves them to another owner's path, or queues them until one (or this
// node, thawed) is usable (docs/nvmeof.md, "Which completion fails
// over"). An engine whose export did not turn inaccessible on every
// address keeps holding: a hand-off on an optimized port would come back
// to it, and fail at the host after five retries. A frozen engine holds
// no lock and writes nothing, so neither step can lose an acknowledged
// write; a thaw meanwhile makes HandOff a no-op (ErrNotFrozen).
func (m *Manager) handOffFrozen(frozen map[[16]byte]Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), fencedANATimeout)
	defer cancel()
	for u, err := range m.fencedInaccessible(ctx, slices.Collect(maps.Keys(frozen))) {
		e := frozen[u]
		m.mu.Lock()
		name := m.names[u]
		m.mu.Unlock()
		if err != nil {
			m.log.Warn("frozen engine: export not set inaccessible; it holds its requests (hosts retry them at their I/O timeout)", "volume", name, "err", err)
			continue
		}
		if err := e.HandOff(); err != nil {
			m.log.Warn("frozen engine: hand-off refused; it holds its requests", "volume", name, "err", err)
			continue
		}
		m.log.Warn("frozen engine handed its requests off: hosts send them to another path", "volume", name)
	}
}

// fencedANATimeout bounds FreezeAll's ANA changes.
const fencedANATimeout = 10 * time.Second

// matchEpoch brings running engine e of v to v's planned epoch: nothing
// when it runs at it, else Freeze and Thaw(epoch). It returns an error
// wrapping engine.ErrFenced when the engine can never run again (another
// owner ran the volume); the caller stops it then.
func (m *Manager) matchEpoch(e Engine, st EngineStatus, v *onDisk) error {
	if v.epoch == 0 || (st.Engine.Epoch == v.epoch && !st.Frozen) {
		return nil
	}
	if st.Engine.Epoch > v.epoch {
		return fmt.Errorf("volume %s: engine runs at epoch %d, newer than the held %d: %w", v.name, st.Engine.Epoch, v.epoch, engine.ErrFenced)
	}
	m.log.Info("engine is not at the held owner epoch; freezing and thawing it", "volume", v.name,
		"engine_epoch", st.Engine.Epoch, "frozen", st.Frozen, "epoch", v.epoch)
	if err := e.Freeze(); err != nil {
		return fmt.Errorf("volume %s: freeze: %w", v.name, err)
	}
	if err := e.Thaw(v.epoch); err != nil {
		if errors.Is(err, engine.ErrFenced) || strings.Contains(err.Error(), engine.ErrFenced.Error()) {
			return fmt.Errorf("volume %s: thaw at epoch %d: %w", v.name, v.epoch, engine.ErrFenced)
		}
		return fmt.Errorf("volume %s: thaw at epoch %d: %w", v.name, v.epoch, err)
	}
	m.log.Info("engine thawed at the held owner epoch", "volume", v.name, "epoch", v.epoch)
	return nil
}

// stopReleased stops the engines of the plan's Stop volumes (their
// exports were removed by the reconcile before).
func (m *Manager) stopReleased(p *ClusterPlan) []error {
	var errs []error
	engines := m.engineSnapshot()
	for _, u := range p.Stop {
		e := engines[u]
		if e == nil {
			continue
		}
		m.mu.Lock()
		name := m.names[u]
		m.mu.Unlock()
		m.log.Warn("this node does not hold the volume's owner key; stopping its engine", "volume", name)
		if err := e.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: stop (not the owner): %w", name, err))
		}
		m.Forget(u, e)
	}
	return errs
}

// Running reports whether volume u has an engine on this node.
func (m *Manager) Running(u [16]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.engines[u] != nil
}

// stopped reports whether u is in the plan's Stop list.
func (p *ClusterPlan) stopped(u [16]byte) bool {
	if p == nil {
		return false
	}
	for _, s := range p.Stop {
		if s == u {
			return true
		}
	}
	return false
}
