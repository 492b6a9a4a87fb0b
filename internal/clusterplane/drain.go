package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// Draining a node (fabraid node drain NODE)
//
// A drained node (registry.SetDrained: keys.Drain) is chosen as no
// volume's owner: placement gives new volumes another owner, a takeover
// and a move never pick it (plan.ChooseOwner, checkMove). While drained,
// the node itself asks, in every reconcile, for the move of each ready
// volume it owns and holds to plan.ChooseOwner's node (drainMoves): the
// planned move (move.go) then hands it over without an I/O error.
// Level-triggered: a move that failed, or a volume that became ready on
// the node meanwhile, is asked for again at the next reconcile. Its
// drives keep serving as members. Undrain deletes the key; volumes do not
// move back by themselves.

// drainMove is a move a drained node asks for.
type drainMove struct {
	Vol   model.Volume
	To    string
	Epoch uint64 // the owner key's epoch this node holds
}

// drainMoves returns the moves that drained node self asks for now: each
// ready volume whose record names self and whose owner key self holds
// (held: uuid -> epoch), with no move under way, to plan.ChooseOwner's
// node; stuck names the volumes no other node may own. Pure.
func drainMoves(v *clusterView, held map[string]uint64, now time.Time) (moves []drainMove, stuck []string) {
	self, ok := v.node(v.Self)
	if !ok || !self.Drained {
		return nil, nil
	}
	for _, vol := range v.Volumes {
		e, holds := held[vol.UUID]
		if vol.Owner != v.Self || vol.State != model.VolumeReady || !holds {
			continue
		}
		if m, ok := v.Moves[vol.UUID]; ok && moveUnderWay(&m.Move, vol, v.Nodes, now) {
			continue
		}
		to := plan.ChooseOwner(v.View, vol)
		if to == "" {
			stuck = append(stuck, fmt.Sprintf("volume %s: no other live, exporting, undrained node may own it", vol.Name))
			continue
		}
		moves = append(moves, drainMove{Vol: vol, To: to, Epoch: e})
	}
	return moves, stuck
}

// drainOwned asks for the moves drainMoves gives (this node is drained).
func (pl *Plane) drainOwned(ctx context.Context, cli *clientv3.Client, v *clusterView, held map[string]uint64) []error {
	moves, stuck := drainMoves(v, held, time.Now())
	for _, s := range stuck {
		pl.log.Warn("node drained, but a volume cannot move away", "why", s)
	}
	var errs []error
	for _, dm := range moves {
		now := time.Now().UTC()
		m := model.Move{Volume: dm.Vol.UUID, To: dm.To, Epoch: dm.Epoch, Phase: model.MoveRequested, Asked: now, Updated: now}
		sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		_, err := volumes.StartMove(sctx, cli, m, func(cur model.Volume, curMove *model.Move) error {
			return checkMove(cur, v.Nodes, dm.To, v.Self, curMove, time.Now())
		})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("node drained: move of volume %s to %s: %w", dm.Vol.Name, dm.To, err))
			continue
		}
		pl.log.Info("node drained: volume move asked", "volume", dm.Vol.Name, "to", dm.To, "epoch", dm.Epoch)
	}
	if len(moves) > 0 {
		pl.kick()
	}
	return errs
}

// drainWait bounds how long a drain with Wait waits for the node to own
// nothing (each move has moveWait of its own; they run at once).
const drainWait = 2 * moveWait

// Drain drains (or undrains) node name and, with q.Wait, waits
// until it owns no volume.
func (pl *Plane) Drain(ctx context.Context, name string, drained bool, q api.DrainRequest) (api.DrainReply, error) {
	cli := pl.cluster.Client()
	if cli == nil {
		return api.DrainReply{}, ErrNoEtcd
	}
	sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	err := registry.SetDrained(sctx, cli, name, drained, time.Now())
	cancel()
	if errors.Is(err, registry.ErrUnknownNode) {
		return api.DrainReply{}, &ownerError{code: http.StatusNotFound, msg: fmt.Sprintf("node %s is not in the cluster (fabraid cluster status lists the nodes)", name)}
	}
	if err != nil {
		return api.DrainReply{}, err
	}
	pl.log.Info("node drain changed", "node", name, "drained", drained)
	pl.kick()
	if !drained || !q.Wait {
		return pl.drainReply(ctx, name)
	}
	wctx, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	for {
		out, err := pl.drainReply(wctx, name)
		if err == nil {
			done, failed := drainEnded(out)
			if done {
				return out, nil
			}
			if failed != nil {
				return out, &ownerError{code: http.StatusConflict, msg: fmt.Sprintf("node %s: move of %s to %s failed: %s", name, failed.Volume, failed.To, failed.Error)}
			}
		}
		select {
		case <-wctx.Done():
			return out, fmt.Errorf("node %s still owns %v (moves under way: %d) after %s; the drain goes on: fabraid node drain %s shows it",
				name, out.Owned, len(out.Moves), drainWait, name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// drainReply says what node name owns now and the moves away from it
// asked since its drain began (all of them for a node not drained).
func (pl *Plane) drainReply(ctx context.Context, name string) (api.DrainReply, error) {
	v, err := pl.currentView(ctx)
	if err != nil {
		return api.DrainReply{}, err
	}
	n, _ := v.node(name)
	return drainState(v, n, time.Now()), nil
}

// drainState is DrainReply for node n in view v: Owned are the volumes
// whose record names n, Moves the moves from n asked since its drain
// began that are under way (moveUnderWay) or failed; Stuck what
// drainMoves cannot move. Pure.
func drainState(v *clusterView, n model.NodeStatus, now time.Time) api.DrainReply {
	out := api.DrainReply{Node: n.Name, Drained: n.Drained}
	held := map[string]uint64{}
	for _, vol := range v.Volumes {
		if vol.Owner == n.Name {
			out.Owned = append(out.Owned, vol.Name)
			held[vol.UUID] = 0
		}
		m, ok := v.Moves[vol.UUID]
		if !ok || m.From != n.Name || m.Asked.Before(n.DrainedSince.Add(-drainClockSkew)) {
			continue
		}
		if moveUnderWay(&m.Move, vol, v.Nodes, now) || m.Phase == model.MoveFailed {
			r := moveReply(m.Move)
			r.Volume = vol.Name
			out.Moves = append(out.Moves, r)
		}
	}
	w := *v
	w.Self = n.Name
	_, out.Stuck = drainMoves(&w, held, now)
	return out
}

// drainClockSkew: a move asked this long before the drain's time (set by
// another node's clock) still counts as the drain's.
const drainClockSkew = time.Minute

// drainEnded says whether a drain has ended: the node owns nothing and no
// move away from it is under way; failed names a failed move.
func drainEnded(out api.DrainReply) (done bool, failed *api.MoveReply) {
	for i, m := range out.Moves {
		if m.Phase == model.MoveFailed {
			return false, &out.Moves[i]
		}
	}
	return len(out.Owned) == 0 && len(out.Moves) == 0, nil
}
