package volmgr

import (
	"context"
	"fmt"
	"slices"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/plugins/backend"
)

// Stopping a frozen engine (docs/cluster.md, "Partition")
//
// A frozen engine (the owner's self-fence, or a hand-over) holds the
// requests nvmet passed to its ublk device: nothing is written, nothing
// is acknowledged. nvmet disables a namespace only once every request it
// passed down has completed, so removing such an export the usual way
// (unlink from the ports, then disable the namespace: kernel/nvmet Diff)
// would wait for ever, and stopping the engine first would complete the
// held requests with errors that reach the hosts. So a frozen engine in
// ClusterPlan.Stop goes in three steps:
//
//  1. its export is unlinked from every port, the ports staying (their
//     removal waits for the requests in flight on their controllers,
//     nvmet_port_release's flush of nvmet_wq): nvmet deletes the
//     export's controllers on each port, and its TCP transport shuts
//     their sockets down before the unlink returns
//     (nvmet_tcp_delete_ctrl), so no completion can reach a host after
//     it; the hosts see a path fail and requeue its commands on their
//     other paths (the new owner's);
//  2. the engine stops: the held requests complete with errors that
//     reach no host;
//  3. the reconcile removes what is left of the export and the ports no
//     export needs (the namespace disable and the port removal find
//     nothing in flight).
//
// Steps 1 and 2 change nothing when they fail: the volume stays out of
// this pass's Stop list (its export, inaccessible while frozen, stays
// as it was) and the next reconcile tries again.

// stopFrozen carries out steps 1 and 2 for the frozen engines in p.Stop
// and takes the volumes it could not stop out of p.Stop for this pass.
func (m *Manager) stopFrozen(ctx context.Context, p *ClusterPlan) []error {
	engines := m.engineSnapshot()
	var frozen [][16]byte
	for _, u := range p.Stop {
		if e := engines[u]; e != nil {
			if st, err := e.Status(); err == nil && st.Frozen {
				frozen = append(frozen, u)
			}
		}
	}
	if len(frozen) == 0 {
		return nil
	}
	keep := func(us [][16]byte) {
		p.Stop = slices.DeleteFunc(slices.Clone(p.Stop), func(u [16]byte) bool { return slices.Contains(us, u) })
	}
	if err := m.x.unlink(ctx, frozen); err != nil {
		keep(frozen)
		return []error{fmt.Errorf("unlink the exports of frozen engines before stopping them: %w", err)}
	}
	var errs []error
	var failed [][16]byte
	for _, u := range frozen {
		e := engines[u]
		m.mu.Lock()
		name := m.names[u]
		m.mu.Unlock()
		m.log.Warn("this node does not hold the volume's owner key; its export is off the ports, stopping its frozen engine (held requests fail, reaching no host)", "volume", name)
		if err := e.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: stop frozen engine (not the owner): %w", name, err))
			failed = append(failed, u)
			continue
		}
		m.Forget(u, e)
	}
	keep(failed)
	return errs
}

// unlink applies the last applied export spec with the exports of us
// unlinked from every listener (backend.Listener.Unlinked: the port stays,
// since the kernel target's port removal waits for the requests in flight
// on its controllers, which the frozen engine holds) and nothing else
// changed; with no spec applied yet in this process it starts from the
// target's actual exports. It then checks with List that no export of us
// is on a listener any more (a backend that ignores Unlinked keeps them).
func (x *exporter) unlink(ctx context.Context, us [][16]byte) error {
	x.lastMu.Lock()
	spec := slices.Clone(x.applied)
	x.lastMu.Unlock()
	if spec == nil {
		actual, err := x.target.List(ctx, volid.NQNPrefix)
		if err != nil {
			return fmt.Errorf("list exports: %w", err)
		}
		spec = actual
	}
	ours := func(nqn string) bool {
		return slices.ContainsFunc(us, func(u [16]byte) bool { return volid.NQN(u) == nqn })
	}
	changed := false
	for i := range spec {
		if !ours(spec[i].NQN) {
			continue
		}
		ls := slices.Clone(spec[i].Listeners)
		for j := range ls {
			if !ls[j].Unlinked {
				ls[j].Unlinked, changed = true, true
			}
		}
		spec[i].Listeners = ls
	}
	if changed {
		if _, err := x.target.Apply(ctx, backend.ApplyRequest{Scope: volid.NQNPrefix, Exports: spec}); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		x.noteExported(spec)
	}
	actual, err := x.target.List(ctx, volid.NQNPrefix)
	if err != nil {
		return fmt.Errorf("list exports after the unlink: %w", err)
	}
	for _, e := range actual {
		if ours(e.NQN) && slices.ContainsFunc(e.Listeners, func(l backend.Listener) bool { return !l.Unlinked }) {
			return fmt.Errorf("export %s is still on a listener after the unlink (the target backend does not unlink)", e.NQN)
		}
	}
	return nil
}
