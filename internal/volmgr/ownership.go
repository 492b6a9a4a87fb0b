package volmgr

import (
	"context"
	"errors"
	"fmt"
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
// Then, in the background, the exports of the frozen engines turn
// ANA-inaccessible: a host would otherwise keep sending requests that
// the frozen engine holds until the host's I/O timeout, and retry them on
// this path again. Inaccessible, they wait at the hosts for another
// owner's path (or for this node's thaw, when the next reconcile applies
// optimized again).
func (m *Manager) FreezeAll() error {
	var errs []error
	var frozen [][16]byte
	for u, e := range m.engineSnapshot() {
		if err := e.Freeze(); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: freeze: %w", volid.Format(u), err))
			continue
		}
		frozen = append(frozen, u)
	}
	if len(frozen) > 0 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), fencedANATimeout)
			defer cancel()
			if err := m.fencedInaccessible(ctx, frozen); err != nil {
				m.log.Warn("frozen engines: exports not set inaccessible (hosts retry on them until their I/O timeout)", "err", err)
			}
		}()
	}
	return errors.Join(errs...)
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
