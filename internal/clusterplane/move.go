package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// The planned move of a volume (`fabraid volume move NAME NODE`,
// docs/cluster.md "Planned move") and the hand-over of a live owner.
//
// The order follows what the Linux host does (docs/nvmeof.md,
// "Switchover", measured in TestIntegrationANASwitchover):
//   - a path in ANA state optimized or non-optimized takes I/O at once, so
//     the new owner presents no usable path before it runs the engine
//     under its own epoch (its export appears only with its engine);
//   - with every path inaccessible the host requeues I/O, no error;
//   - a target that answers a reconnect without the NQN (unlinked,
//     removed) makes the host delete that controller at once (DNR), and
//     EIO follows if it was the last path: the old owner keeps its export
//     linked and inaccessible until the consumers have the new path.
//
// The decision is one etcd transaction (volumes.StartMove): the record's
// owner becomes the target N and the move record (keys.Move) is written
// with phase requested and the old owner O's epoch E. From there every
// step is a node's loop reacting to etcd:
//
//	O  key held, record owner another live node: drain (volmgr
//	   DrainEngine: export inaccessible, freeze, hand-off, flush), then
//	   Resign the key; the export stays linked (ClusterPlan.Drain)  -> resigned
//	N  no key, record owner me: Acquire (E' > E), storage fence,
//	   assemble at E', ublk, export (optimized); its status says epoch
//	   E' and exported; consumers connect N (the old path is kept until
//	   the new one is live, volmgr paths.go) and publish their paths
//	O  N serves at E' > E and every live node's paths show a live
//	   controller to another address than O's (or none to O): remove
//	   the export, then stop the engine                            -> done
//
// The same hand-over runs when anything else changes the record's owner
// to another live node (no move record then). A node that dies mid-way
// is failover's: before O resigns, O's lease expiry lets ChooseOwner's
// node take over; after it, N (or ChooseOwner's node when N dies) serves,
// and O, still draining, removes its export once that node serves. If O
// itself acquires the volume again (failover chose it), the drain ends:
// its frozen engine thaws at the new epoch and the export turns
// optimized.

// moveWait bounds how long `volume move --wait` waits for the move to end.
const moveWait = 4 * time.Minute

// moveStale: a move record not over whose From node is down, whose
// record owner is no longer To, or that has not changed for this long
// blocks no new move (its old owner restarted mid-way and lost its drain,
// or failover ended it).
const moveStale = 10 * time.Minute

// consumerWait is how long an old owner keeps its inaccessible export
// after the new owner serves while some live node shows no path to the
// new owner (its fabraidd is stuck or an old version that publishes no
// paths); then the export goes anyway, with a warning naming the nodes.
const consumerWait = 2 * time.Minute

// moveUnderWay says whether m blocks a new move of vol.
func moveUnderWay(m *model.Move, vol model.Volume, nodes []model.NodeStatus, now time.Time) bool {
	if m == nil || m.Over() || vol.Owner != m.To || now.Sub(m.Updated) > moveStale {
		return false
	}
	i := slices.IndexFunc(nodes, func(n model.NodeStatus) bool { return n.Name == m.From })
	return i >= 0 && nodes[i].Alive
}

// checkMove refuses a move that cannot or need not be made: the volume
// must be ready with a live owner holding it and no move under way, and
// the target must be another registered, live node. keyNode is the owner
// key's holder ("" when free).
func checkMove(vol model.Volume, nodes []model.NodeStatus, target, keyNode string, current *model.Move, now time.Time) error {
	if target == "" {
		return fmt.Errorf("volume %s: move to which node? (give a node name)", vol.Name)
	}
	if moveUnderWay(current, vol, nodes, now) {
		return fmt.Errorf("volume %s: a move from %s to %s is already under way (phase %s)", vol.Name, current.From, current.To, current.Phase)
	}
	if vol.State != model.VolumeReady {
		return fmt.Errorf("volume %s: state %s: only a ready volume can move", vol.Name, vol.State)
	}
	var names []string
	var to, from *model.NodeStatus
	for i := range nodes {
		names = append(names, nodes[i].Name)
		switch nodes[i].Name {
		case target:
			to = &nodes[i]
		case vol.Owner:
			from = &nodes[i]
		}
	}
	switch {
	case target == vol.Owner:
		return fmt.Errorf("volume %s: node %s already owns it", vol.Name, target)
	case to == nil:
		slices.Sort(names)
		return fmt.Errorf("volume %s: node %s is not in the cluster (nodes: %s)", vol.Name, target, strings.Join(names, ", "))
	case !to.Alive:
		return fmt.Errorf("volume %s: node %s is down: a volume moves only to a live node", vol.Name, target)
	case to.Drained:
		return fmt.Errorf("volume %s: node %s is drained: it owns no volume until fabraid node undrain %s", vol.Name, target, target)
	case vol.Owner == "" || from == nil || !from.Alive:
		return fmt.Errorf("volume %s: its owner %q is not running: failover, not a move, brings it back", vol.Name, vol.Owner)
	case keyNode != vol.Owner:
		return fmt.Errorf("volume %s: its owner %s does not hold it now (owner key: %q; a takeover or hand-over is under way): try again", vol.Name, vol.Owner, keyNode)
	case len(to.StorageAddresses) == 0 && to.ClusterAddress == "":
		return fmt.Errorf("volume %s: node %s has no storage address to export on", vol.Name, target)
	}
	return nil
}

// handover is an old owner's drain of one volume (in memory: a daemon
// restarted mid-way stops the volume as a non-owner).
type handover struct {
	epoch    owner.Epoch // the epoch this node held the volume at
	frozen   bool        // DrainEngine done: export inaccessible, engine frozen
	resigned bool
	since    time.Time // the export turned inaccessible
	served   time.Time // first seen served by the new owner
}

// handoverFacts is what the old owner knows when it decides whether its
// export may go.
type handoverFacts struct {
	Self        string
	RecordOwner string
	KeyNode     string // owner key holder, "" when free
	KeyEpoch    uint64
	Status      *model.VolumeStatus // the record owner's published status
	// Pending are the live nodes whose published paths show a controller
	// to this node's export and no live one elsewhere (or no paths at all).
	Pending []string
	Now     time.Time
}

// servedElsewhere says whether another node runs and exports the volume
// under the owner key, at an epoch newer than h's.
func servedElsewhere(h handover, f handoverFacts) bool {
	s := f.Status
	return s != nil && f.RecordOwner != f.Self && s.Owner == f.RecordOwner && f.KeyNode == s.Owner &&
		s.Epoch == f.KeyEpoch && s.Epoch > uint64(h.epoch) && s.Exported &&
		s.State != "stopped" && s.State != "waiting" && s.State != model.VolumeCreating
}

// mayUnexport is the old owner's decision for a frozen, resigned volume:
// true when its export may go now, with the reason for the log.
func mayUnexport(h handover, f handoverFacts) (bool, string) {
	if !servedElsewhere(h, f) {
		return false, ""
	}
	if len(f.Pending) == 0 {
		return true, fmt.Sprintf("%s serves at epoch %d and every live node has a live path to it", f.RecordOwner, f.KeyEpoch)
	}
	if !h.served.IsZero() && f.Now.Sub(h.served) >= consumerWait {
		return true, fmt.Sprintf("%s serves at epoch %d; nodes %s show no live path to it after %s: removing the export anyway",
			f.RecordOwner, f.KeyEpoch, strings.Join(f.Pending, ", "), consumerWait)
	}
	return false, ""
}

// pendingConsumers are the live nodes of v attached to volume uuid that
// may still depend on this node's export of it: their published paths
// show a controller to one of addrs and none live elsewhere, or they
// publish no paths.
func pendingConsumers(v *clusterView, uuid string, addrs []string) []string {
	vol, _ := v.volume(uuid)
	var out []string
	for _, n := range v.Nodes {
		if !n.Alive || !vol.AttachedTo(n.Name) {
			continue
		}
		np, ok := v.Paths[n.Name]
		if !ok {
			out = append(out, n.Name)
			continue
		}
		old, other := false, false
		for _, p := range np.Volumes[uuid] {
			switch {
			case slices.Contains(addrs, p.Address):
				old = true
			case p.State == "live":
				other = true
			}
		}
		if old && !other {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Move asks for the move of volume ref to q.Node and, with q.Wait,
// waits until it has ended.
func (pl *Plane) Move(ctx context.Context, ref string, q api.MoveRequest) (api.MoveReply, error) {
	v, err := pl.currentView(ctx)
	if err != nil {
		return api.MoveReply{}, err
	}
	vol, ok := v.volume(ref)
	if !ok {
		return api.MoveReply{}, fmt.Errorf("%w: %s", volmgr.ErrNotFound, ref)
	}
	cli := pl.cluster.Client()
	gctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	ks, err := owner.List(gctx, cli)
	cancel()
	if err != nil {
		return api.MoveReply{}, err
	}
	k := ks[vol.UUID]
	now := time.Now().UTC()
	m := model.Move{Volume: vol.UUID, To: q.Node, Epoch: uint64(k.Epoch), Phase: model.MoveRequested, Asked: now, Updated: now}
	sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	_, err = volumes.StartMove(sctx, cli, m, func(cur model.Volume, curMove *model.Move) error {
		if err := checkMove(cur, v.Nodes, q.Node, k.Node, curMove, time.Now()); err != nil {
			return &ownerError{code: http.StatusConflict, msg: err.Error()}
		}
		return nil
	})
	cancel()
	if err != nil {
		if errors.Is(err, volumes.ErrNotFound) {
			return api.MoveReply{}, fmt.Errorf("%w: %w", volmgr.ErrNotFound, err)
		}
		return api.MoveReply{}, err
	}
	pl.log.Info("volume move asked", "volume", vol.Name, "from", vol.Owner, "to", q.Node, "epoch", k.Epoch)
	pl.kick()
	m.From = vol.Owner
	if !q.Wait {
		return moveReply(m), nil
	}
	wctx, cancel := context.WithTimeout(ctx, moveWait)
	defer cancel()
	for {
		gctx, gcancel := context.WithTimeout(wctx, etcdTimeout)
		cur, _, ok, err := volumes.GetMove(gctx, cli, vol.UUID)
		gcancel()
		if err == nil && ok {
			m = cur.Move
			if m.Over() {
				if m.Phase == model.MoveFailed {
					return moveReply(m), &ownerError{code: http.StatusConflict, msg: fmt.Sprintf("volume %s: move to %s failed: %s", vol.Name, m.To, m.Error)}
				}
				return moveReply(m), nil
			}
		}
		select {
		case <-wctx.Done():
			return moveReply(m), fmt.Errorf("volume %s: move to %s not done after %s (phase %s); it goes on: fabraid volume show %s",
				vol.Name, q.Node, moveWait, m.Phase, vol.Name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func moveReply(m model.Move) api.MoveReply {
	return api.MoveReply{Volume: m.Volume, From: m.From, To: m.To, Phase: m.Phase, Epoch: m.Epoch, ToEpoch: m.ToEpoch,
		Error: m.Error, PauseSeconds: m.PauseSeconds}
}

// manager is what the hand-over needs of the volume manager.
type manager interface {
	DrainEngine(ctx context.Context, u [16]byte) (time.Duration, error)
	SetANAState(ctx context.Context, u [16]byte, state string) error
	Running(u [16]byte) bool
}

// afterReconcile carries out the hand-over steps of plan p after the
// manager's reconcile: drains and resigns, turns taken-back exports
// optimized, ends finished hand-overs, and moves the move records on.
func (o *ownership) afterReconcile(ctx context.Context, cli *clientv3.Client, v *clusterView, p ownerPlan, m manager) []error {
	var errs []error
	for uuid, e := range p.Drain {
		h := o.handing[uuid]
		if h == nil {
			continue
		}
		u, _ := volid.ParseUUID(uuid)
		if m.Running(u) {
			d, err := m.DrainEngine(ctx, u)
			if err != nil {
				errs = append(errs, fmt.Errorf("hand-over: %w (the volume stays here; next reconcile retries)", err))
				continue
			}
			h.since = time.Now().Add(-d)
		} else {
			h.since = time.Now()
		}
		h.frozen = true
		o.releaseImports(ctx, cli, v, uuid)
		p.Resign[uuid] = e
	}
	for uuid, e := range p.Resign {
		h := o.handing[uuid]
		if err := owner.Resign(ctx, cli, uuid, e); err != nil {
			errs = append(errs, fmt.Errorf("hand-over: %w", err))
			continue
		}
		o.forget(uuid)
		if h != nil {
			h.resigned = true
		}
		o.log.Info("hand-over: drained and resigned; the export stays inaccessible until the new owner serves", "uuid", uuid, "epoch", e)
		o.moveRecord(ctx, cli, uuid, func(m *model.Move) bool {
			if m.Phase != model.MoveRequested {
				return false
			}
			m.Phase = model.MoveResigned
			return true
		})
	}
	for _, uuid := range p.Undrain {
		u, _ := volid.ParseUUID(uuid)
		if err := m.SetANAState(ctx, u, volmgr.ANAOptimized); err != nil && !errors.Is(err, volmgr.ErrNotExported) {
			errs = append(errs, fmt.Errorf("hand-over ended: %w", err))
		}
		o.log.Warn("hand-over ended: this node runs the volume again", "uuid", uuid, "epoch", p.Held[uuid])
		o.moveRecord(ctx, cli, uuid, func(m *model.Move) bool {
			m.Phase, m.Error = model.MoveFailed, fmt.Sprintf("%s did not take the volume over; %s runs it again (epoch %d)", m.To, o.self, p.Held[uuid])
			return true
		})
	}
	for _, uuid := range p.Finish {
		u, _ := volid.ParseUUID(uuid)
		h := o.handing[uuid]
		if h == nil || m.Running(u) {
			continue
		}
		delete(o.handing, uuid)
		st := v.Status[uuid]
		o.log.Info("hand-over done: export removed, engine stopped", "uuid", uuid, "owner", st.Owner, "epoch", st.Epoch)
		o.moveRecord(ctx, cli, uuid, func(m *model.Move) bool {
			m.Phase, m.ToEpoch = model.MoveDone, st.Epoch
			if !h.served.IsZero() && !h.since.IsZero() {
				m.PauseSeconds = h.served.Sub(h.since).Seconds()
			}
			if st.Owner != m.To {
				m.Phase, m.Error = model.MoveFailed, fmt.Sprintf("%s did not take the volume over; %s serves it (epoch %d)", m.To, st.Owner, st.Epoch)
			}
			return true
		})
	}
	return errs
}

// moveRecord applies f to the volume's move record when this node is its
// From and it is not over (f says whether it changed it); a lost race is
// left to the next reconcile.
func (o *ownership) moveRecord(ctx context.Context, cli *clientv3.Client, uuid string, f func(*model.Move) bool) {
	if err := o.updateMove(ctx, cli, uuid, func(m model.Move) bool { return m.From == o.self && !m.Over() }, f); err != nil {
		o.log.Warn("move record not updated", "uuid", uuid, "err", err)
	}
}

// updateMove applies f to the volume's move record when mine says this
// node may change it now (f says whether it changed it), compared on its
// mod revision.
func (o *ownership) updateMove(ctx context.Context, cli *clientv3.Client, uuid string, mine func(model.Move) bool, f func(*model.Move) bool) error {
	mctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	cur, rev, ok, err := volumes.GetMove(mctx, cli, uuid)
	if err != nil || !ok || !mine(cur.Move) {
		return err
	}
	m := cur.Move
	if !f(&m) {
		return nil
	}
	m.Updated = time.Now().UTC()
	if err := volumes.UpdateMove(mctx, cli, rev, m); err != nil {
		return err
	}
	o.log.Info("move record", "uuid", uuid, "phase", m.Phase, "from", m.From, "to", m.To, "prepared", m.Prepared, "released", m.Released,
		"pause_seconds", m.PauseSeconds, "error", m.Error)
	return nil
}
