package clusterplane

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	decision "github.com/fabraid/fabraid/internal/clusterplane/ownership"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/importer"
)

// A planned move prepares its target before the old owner stops serving
// (docs/cluster.md, "Planned move"; internal/cluster/plan, handover.go):
//
//	N (target)  decision Prepare: import the members (the drive exporters
//	            allow N next to the key holder O), run nothing; once every
//	            member on a live node is found: move record Prepared
//	O (owner)   serves until Prepared (or PrepareWait), then drains; with
//	            its engine frozen and flushed it ends its own member
//	            imports and sets Released, then resigns
//	N           on the key's deletion: acquires at E' > E (acquire.go);
//	            prepared, with O released: without waiting for the
//	            storage fence (decision.CleanHandover), else after it
//	exporters   each drops O from the allowed hosts when it sees E'; a
//	            released O needs no fence of the drives, so N's
//	            controllers stay
//
// N writes no member before it holds the key and either the fence at its
// epoch is acknowledged or O released (frozen for good at E, no
// controller left), so importing ahead changes nothing O relies on.

// moveFacts is the volume's move record (not over) as the ownership
// decision sees it, with when this node first saw it: the start of its
// PrepareWait (a reconcile is kicked at its end).
func (o *ownership) moveFacts(v *clusterView, uuid string, now time.Time) decision.Move {
	sm, ok := v.Moves[uuid]
	if !ok || sm.Over() {
		delete(o.movesSeen, uuid)
		return decision.Move{}
	}
	ms, ok := o.movesSeen[uuid]
	if !ok || !ms.asked.Equal(sm.Asked) {
		ms = moveSeen{asked: sm.Asked, seen: now}
		o.movesSeen[uuid] = ms
		if sm.From == o.self {
			time.AfterFunc(decision.PrepareWait, o.kick)
		}
	}
	return moveOf(sm.Move, ms.seen)
}

// moveOf is move record m (not over) as the ownership decision sees it,
// first seen at seen.
func moveOf(m model.Move, seen time.Time) decision.Move {
	return decision.Move{From: m.From, To: m.To, Requested: m.Phase == model.MoveRequested, Prepared: m.Prepared,
		Released: m.Released, Seen: seen}
}

// voidRelease clears this node's Released in vol's move record before it
// acquires the volume again: from then on it imports the members, so the
// exporters must end its controllers when it loses the key. An error
// leaves the key alone this pass.
func (o *ownership) voidRelease(ctx context.Context, cli *clientv3.Client, v *clusterView, vol model.Volume) error {
	if sm, ok := v.Moves[vol.UUID]; !ok || sm.From != o.self {
		return nil
	}
	err := o.updateMove(ctx, cli, vol.UUID, func(m model.Move) bool { return m.From == o.self }, func(m *model.Move) bool {
		if !m.Released {
			return false
		}
		m.Released = false
		return true
	})
	if err != nil {
		return fmt.Errorf("volume %s: clear this node's release in the move record: %w", vol.Name, err)
	}
	return nil
}

// releaseImports ends this node's imports of the members of a volume it
// moves away under a move record (phase requested), its engine frozen and
// its members flushed, and then says so in the record (Released). When it
// cannot, the record says nothing and the exporters fence the drives as
// for any owner change (the target connects again).
func (o *ownership) releaseImports(ctx context.Context, cli *clientv3.Client, v *clusterView, uuid string) {
	sm, ok := v.Moves[uuid]
	vol, found := v.volume(uuid)
	if !ok || !found || o.release == nil || sm.From != o.self || sm.Phase != model.MoveRequested {
		return
	}
	if err := o.release(ctx, vol); err != nil {
		o.log.Warn("hand-over: member imports not released; the exporters fence the drives", "volume", vol.Name, "err", err)
		return
	}
	err := o.updateMove(ctx, cli, uuid, func(m model.Move) bool { return m.From == o.self && m.Phase == model.MoveRequested }, func(m *model.Move) bool {
		m.Released = true
		return true
	})
	if err != nil {
		o.log.Warn("hand-over: release not recorded; the exporters fence the drives", "volume", vol.Name, "err", err)
	}
}

// markPrepared sets Prepared in the move records of the volumes this
// node has imported every member of (prepared, plan.PreparedVolumes) as
// a planned move's target.
func (o *ownership) markPrepared(ctx context.Context, cli *clientv3.Client, prepared []string) []error {
	var errs []error
	for _, uuid := range prepared {
		err := o.updateMove(ctx, cli, uuid, func(m model.Move) bool { return m.To == o.self && m.Phase == model.MoveRequested },
			func(m *model.Move) bool {
				if m.Prepared {
					return false
				}
				m.Prepared = true
				return true
			})
		if err != nil {
			errs = append(errs, fmt.Errorf("planned move of %s: record prepared: %w", uuid, err))
		}
	}
	return errs
}

// prepared records the planned moves to this node whose members it has
// imported (prep: the volumes it prepares), and asks for another pass
// soon while some are not (a drive exporter may not allow this node yet).
func (pl *Plane) prepared(ctx context.Context, cli *clientv3.Client, v *clusterView, prep []plan.Owned, r importer.Result) []error {
	done := plan.PreparedVolumes(v.View, prep, r)
	for _, o := range prep {
		if !slices.Contains(done, o.Volume.UUID) {
			pl.log.Info("planned move to this node: importing the members", "volume", o.Volume.Name, "missing", len(r.Missing), "problems", len(r.Problems))
		}
	}
	if len(done) < len(prep) {
		time.AfterFunc(consumerRetry, pl.kick)
	}
	return pl.owners.markPrepared(ctx, cli, done)
}

// releaseImports disconnects this node's imports of vol's members on
// other nodes (the importer's pass over imp without them) and checks that
// no controller to them is left.
func (pl *Plane) releaseImports(ctx context.Context, imp plan.Import, vol model.Volume) error {
	drop := map[string]bool{}
	for _, m := range vol.Members {
		if m.Node != pl.cfg.NodeName {
			drop[exporter.NQN(m.Drive)] = true
		}
	}
	in := imp.Input
	in.Remotes = slices.DeleteFunc(slices.Clone(in.Remotes), func(r importer.Remote) bool { return drop[r.NQN] })
	res, err := pl.loop.im.Reconcile(ctx, in)
	if err != nil {
		return fmt.Errorf("release the member imports of %s: %w", vol.Name, err)
	}
	ctrls, err := pl.loop.im.Host.Sysfs.Controllers()
	if err != nil {
		return fmt.Errorf("release the member imports of %s: %w", vol.Name, err)
	}
	for _, c := range ctrls {
		if drop[c.SubsystemNQN] {
			return fmt.Errorf("release the member imports of %s: controller %s to %s is still there (%v)", vol.Name, c.Name, c.SubsystemNQN, res.Problems)
		}
	}
	pl.log.Info("hand-over: member imports released", "volume", vol.Name, "drives", len(drop))
	return nil
}

// handoverExports is WithHandovers over this pass's view and the owner
// keys the exporter uses (reconcileExports).
func handoverExports(in exporter.Input, v *clusterView, ks map[string]plan.OwnerKey) exporter.Input {
	moves := make(map[string]model.Move, len(v.Moves))
	for u, sm := range v.Moves {
		moves[u] = sm.Move
	}
	return plan.WithHandovers(in, v.View, ks, moves)
}
