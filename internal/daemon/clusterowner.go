package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/fence"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volid"
)

// Volume ownership in fabraidd (docs/cluster.md, "Failover")
//
// Every node runs one owner.Session (lease owner_lease_ttl, default
// owner.DefaultTTL) while it is
// in a cluster; its OnFence freezes every engine of the node. Each
// reconcile, before anything is imported or assembled, the node settles
// the ownership of every volume record:
//
//   - owner key on this node's current lease: held. Once the storage fence
//     for its epoch is acknowledged (fence.Wait over the volume's other
//     member nodes) the volume is planned at that epoch; before, it is not
//     run. When the record names another, alive node as owner (a move, or
//     a lost race), the node hands the volume over (clustermove.go): it
//     drains (export inaccessible, engine flushed and frozen), resigns
//     the key and keeps the export linked until the record owner serves
//     and the consumers have its path; the record owner acquires next.
//   - owner key of another node: not run here; an engine of it is
//     unexported and stopped (volmgr ClusterPlan.Stop). Only then: without
//     a key, or before the storage fence of a held key is acknowledged, an
//     engine here is neither planned nor stopped (it stays frozen,
//     exported, requests queued).
//   - owner key of this node's previous, fenced lease (not expired at the
//     server yet): not planned and not stopped: the frozen engine waits
//     (exported, requests queued) until the key goes.
//   - no owner key, record owner this node: Acquire, unless this node
//     exports nothing (require_auth, clusterauth.go): then it acquires
//     nothing and another node takes the volume over after ownerGrace.
//   - no owner key, ready, record owner dead (no alive key) or the key has
//     been absent for ownerGrace while this node watched: the takeover,
//     by the one node plan.ChooseOwner picks (same answer on every node):
//     CAS the record's owner to this node, Acquire, fence, then import,
//     assemble degraded at the new epoch, ublk, export on its own address.
//
// A node that holds no key for a volume never assembles it: plan's
// ImporterInput imports only View.Held, and the manager plans only those.

// ownerGrace is how long a ready volume may have no owner key while its
// record owner is alive before another node takes it over (an owner that
// keeps its node lease but cannot hold the volume: it cannot import its
// members, or it was fenced and does not come back). A live owner
// re-acquires within one reconcile of the deletion (the watch kicks it).
// It is longer than the node lease TTL (node_lease_ttl, 10 s), so a dead
// owner is taken over through its alive key's expiry, when its members
// count as gone (the start gate does not wait for them, the importer
// makes no connection to its dead address, which would block for the TCP
// SYN retries), never through the grace.
const ownerGrace = 15 * time.Second

// fenceTimeout bounds one wait for the storage fence acknowledgements; the
// next reconcile waits again (the volume is not run meanwhile).
const fenceTimeout = 20 * time.Second

// fenceWaitFunc is fence.Wait's signature; tests replace it.
type fenceWaitFunc func(ctx context.Context, cli *clientv3.Client, volume string, epoch uint64, exporters []string) error

// ownership is this node's owner session and the volumes it holds on it.
type ownership struct {
	self   string
	ttl    time.Duration // owner lease TTL (owner_lease_ttl)
	log    *slog.Logger
	freeze func() error // every engine of the node (OnFence)
	kick   func()
	wait   fenceWaitFunc

	mu     sync.Mutex
	cli    *clientv3.Client
	sess   *owner.Session
	fenced map[string]owner.Epoch // held on sess and storage-fenced at that epoch
	absent map[string]time.Time   // first seen without an owner key while its record owner was alive
	seen   map[string]owner.Key   // other nodes' owner keys at the last list
	lapsed map[string]time.Time   // nodes whose owner session was seen to end, and when
	lost   time.Time              // when the last session fenced (for the log)
	// handing are the volumes this node hands over (clustermove.go).
	handing map[string]*handover
	// notAcquired: volumes whose record names this node as owner, not
	// acquired because it exports nothing (logged once each).
	notAcquired map[string]bool
}

func newOwnership(self string, ttl time.Duration, log *slog.Logger, freeze func() error, kick func()) *ownership {
	return &ownership{self: self, ttl: ttl, log: log, freeze: freeze, kick: kick, wait: fence.Wait,
		fenced: map[string]owner.Epoch{}, absent: map[string]time.Time{},
		seen: map[string]owner.Key{}, lapsed: map[string]time.Time{}, handing: map[string]*handover{},
		notAcquired: map[string]bool{}}
}

// session returns the current owner session, making a new one when there
// is none, it fenced, or the etcd client changed.
func (o *ownership) session(ctx context.Context, cli *clientv3.Client) (*owner.Session, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sess != nil && o.cli == cli {
		select {
		case <-o.sess.Fenced():
		default:
			return o.sess, nil
		}
	}
	if old := o.sess; old != nil {
		o.sess = nil
		go old.Close(context.Background()) // revoke if etcd still knows it; its keys go with it
	}
	clear(o.fenced)
	s, err := owner.NewSession(ctx, cli, owner.Options{TTL: o.ttl, OnFence: o.onFence})
	if err != nil {
		return nil, err
	}
	o.sess, o.cli = s, cli
	o.log.Info("owner session", "lease", owner.LeaseString(s.Lease()), "ttl", s.TTL().String())
	return s, nil
}

// onFence is the session's self-fence: freeze every engine now.
func (o *ownership) onFence() {
	t0 := time.Now()
	err := o.freeze()
	o.log.Error("owner lease fenced (etcd not answering the keepalives in time): every engine frozen",
		"seconds", time.Since(t0).Seconds(), "err", err)
	o.mu.Lock()
	o.lost = t0
	o.mu.Unlock()
	o.kick()
}

// close ends the session at daemon exit: the engines freeze (OnFence) and
// the lease is revoked, so another node may take the volumes over at once
// (or this node again when it is back).
func (o *ownership) close(ctx context.Context) {
	o.mu.Lock()
	s := o.sess
	o.sess = nil
	o.mu.Unlock()
	if s != nil {
		if err := s.Close(ctx); err != nil {
			o.log.Warn("owner session close", "err", err)
		}
	}
}

// ownerPlan is what one reconcile settled.
type ownerPlan struct {
	Held map[string]uint64 // volume UUID -> epoch: run these (plan.View.Held)
	Stop [][16]byte        // must not run here (volmgr ClusterPlan.Stop)
	// Drain: held volumes to drain after this pass's manager reconcile
	// (then resigned); Resign: frozen volumes whose key is still this
	// node's; Keep: frozen, resigned volumes whose export stays
	// (volmgr ClusterPlan.Drain); Finish: volumes in Stop whose hand-over
	// ends when the engine is gone; Undrain: volumes held again after a
	// drain (their export turns optimized once the engine runs).
	Drain   map[string]owner.Epoch
	Resign  map[string]owner.Epoch
	Keep    [][16]byte
	Finish  []string
	Undrain []string
}

// reconcile settles the ownership of every volume of v (see the comment
// at the top).
func (o *ownership) reconcile(ctx context.Context, cli *clientv3.Client, v *clusterView) (ownerPlan, error) {
	p := ownerPlan{Held: map[string]uint64{}, Drain: map[string]owner.Epoch{}, Resign: map[string]owner.Epoch{}}
	s, err := o.session(ctx, cli)
	if err != nil {
		return p, fmt.Errorf("owner session: %w", err)
	}
	gctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	ks, err := owner.List(gctx, cli)
	cancel()
	if err != nil {
		return p, err
	}
	mine := owner.LeaseString(s.Lease())
	var errs []error
	if err := o.noteLapses(ctx, cli, v, ks); err != nil {
		errs = append(errs, err)
	}
	ov := o.ownershipView(v)
	records := map[string]bool{}
	for i, vol := range v.Volumes {
		records[vol.UUID] = true
		u, perr := volid.ParseUUID(vol.UUID)
		if perr != nil {
			continue
		}
		k, has := ks[vol.UUID]
		if !has || k.Lease != mine || k.Node != o.self {
			o.forget(vol.UUID)
		}
		h := o.handing[vol.UUID]
		mineNow := has && k.Lease == mine && k.Node == o.self
		if h != nil && !h.frozen && !mineNow {
			delete(o.handing, vol.UUID) // lost the key before the drain froze the engine
			h = nil
		}
		switch {
		case h != nil && h.frozen && mineNow:
			// Frozen at this epoch, the key not resigned yet: a frozen
			// engine never thaws at its own epoch, so the hand-over
			// goes on whatever the record says now.
			delete(o.absent, vol.UUID)
			p.Resign[vol.UUID] = k.Epoch
			p.Keep = append(p.Keep, u)
			continue
		case h != nil && h.frozen && vol.Owner != o.self && !o.mayTakeBack(v, vol, has):
			delete(o.absent, vol.UUID)
			if o.handedOver(v, vol, k, has, h) {
				p.Stop = append(p.Stop, u)
				p.Finish = append(p.Finish, vol.UUID)
			} else {
				p.Keep = append(p.Keep, u)
			}
			continue
		case mineNow:
			delete(o.absent, vol.UUID)
			if vol.Owner != o.self && vol.State == model.VolumeReady && alive(v, vol.Owner) {
				// The desired owner is another live node: hand it over.
				// This pass still runs it; the drain follows the
				// manager's reconcile (afterReconcile).
				if h == nil {
					o.handing[vol.UUID] = &handover{epoch: k.Epoch}
				}
				p.Drain[vol.UUID] = k.Epoch
			} else if h != nil {
				delete(o.handing, vol.UUID) // the record came back before the drain froze it
			}
			if err := o.fence(ctx, cli, vol, k.Epoch, ""); err != nil {
				errs = append(errs, err) // not run yet; an engine stays as it is
				continue
			}
			p.Held[vol.UUID] = uint64(k.Epoch)
			continue
		case has && k.Node == o.self:
			// This node's previous lease, fenced here but not expired
			// at the server yet: its engine stays as it is (frozen,
			// exported, requests queued) until the key goes and this
			// node acquires again (Thaw at the new epoch) or another
			// node does (then it is stopped).
			delete(o.absent, vol.UUID)
			continue
		case has:
			delete(o.absent, vol.UUID)
			p.Stop = append(p.Stop, u)
			continue
		}
		// No owner key: nobody may run the volume, and an engine of it
		// here (frozen by this node's self-fence) stays as it is, exported
		// with its requests queued: stopping it would take its consumers'
		// only path before another one exists.
		var e owner.Epoch
		skip := ""
		switch {
		case vol.Owner == o.self && o.cannotExport(v, vol):
			continue // another node takes it over (ownerGone, plan.ChooseOwner)
		case vol.Owner == o.self:
			delete(o.absent, vol.UUID)
			e, err = owner.Acquire(ctx, s, vol.UUID, o.self)
			if err != nil {
				errs = append(errs, fmt.Errorf("volume %s: %w", vol.Name, err))
				continue
			}
			o.log.Info("acquired volume", "volume", vol.Name, "epoch", e)
		case vol.State == model.VolumeReady && o.ownerGone(ov, vol):
			if plan.ChooseOwner(ov.View, vol) != o.self {
				continue
			}
			if e, err = o.takeOver(ctx, cli, s, vol); err != nil {
				errs = append(errs, err)
				continue
			}
			if _, ok := o.lapsed[vol.Owner]; ok {
				// The old owner's session ended: it froze before its
				// key could expire, and only it writes its own drives.
				skip = vol.Owner
			}
			// This pass's view has the record as written: the drive
			// exporter unexports this node's own members (tearing
			// down the old owner's controllers to them) before the
			// importer opens them.
			v.Volumes[i].Owner = o.self
		default:
			continue
		}
		if err := o.fence(ctx, cli, vol, e, skip); err != nil {
			errs = append(errs, err)
			continue
		}
		p.Held[vol.UUID] = uint64(e)
		if h != nil {
			// Held again at a newer epoch (failover chose this node,
			// or the record came back): the frozen engine thaws at e.
			delete(o.handing, vol.UUID)
			p.Undrain = append(p.Undrain, vol.UUID)
		}
	}
	// A frozen hand-over's export goes only through Finish (handedOver):
	// whatever else put it in Stop (a failed Acquire, a stranger's key)
	// keeps it linked and inaccessible.
	p.Stop = slices.DeleteFunc(p.Stop, func(u [16]byte) bool {
		uuid := volid.Format(u)
		if h := o.handing[uuid]; h != nil && h.frozen && !slices.Contains(p.Finish, uuid) {
			p.Keep = append(p.Keep, u)
			return true
		}
		return false
	})
	// Keys of this lease whose volume record is gone (deleted here).
	for uuid, k := range ks {
		if !records[uuid] && k.Lease == mine {
			if err := owner.Resign(ctx, cli, uuid, k.Epoch); err != nil {
				errs = append(errs, err)
			}
			o.forget(uuid)
		}
	}
	return p, errors.Join(errs...)
}

// lapseWindow is how long a node whose owner session ended counts as dead
// for ownership while its alive key (node_lease_ttl, 10 s) lasts: its
// volumes are taken over, and its members are not waited for nor
// connected to until its exporter acknowledges the new epoch (unfenced).
// Longer than the node lease TTL, so a dead node's alive key is gone
// by then; a node that is alive again is treated as alive after it.
const lapseWindow = 30 * time.Second

// noteLapses records the nodes whose owner session ended since the last
// list (a key of theirs vanished and its lease is gone at the server, as
// opposed to resigned under a live lease); ownershipView counts those in
// lapseWindow as dead for the takeover decision. A lapsed owner froze its engines before its
// key could expire (owner.Session's guard), so its volumes can be taken
// over at its key's expiry (owner TTL) instead of its alive key's.
func (o *ownership) noteLapses(ctx context.Context, cli *clientv3.Client, v *clusterView, ks map[string]owner.Key) error {
	var errs []error
	for uuid, prev := range o.seen {
		if _, still := ks[uuid]; still {
			continue
		}
		delete(o.seen, uuid)
		lctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		ended, err := owner.LeaseEnded(lctx, cli, prev.LeaseID)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ended {
			if _, known := o.lapsed[prev.Node]; !known {
				o.log.Warn("owner session of a node ended (its owner key lapsed)", "node", prev.Node, "volume", uuid, "epoch", prev.Epoch)
				o.lapsed[prev.Node] = time.Now()
				time.AfterFunc(lapseWindow, o.kick)
			}
		}
	}
	for uuid, k := range ks {
		if k.Node == o.self {
			continue
		}
		o.seen[uuid] = k
		delete(o.lapsed, k.Node) // it holds a key on a live session again
	}
	for node, at := range o.lapsed {
		if time.Since(at) >= lapseWindow {
			delete(o.lapsed, node)
			continue
		}
	}
	return errors.Join(errs...)
}

// ownershipView is v with the nodes in lapseWindow dead, for the takeover
// decision only (ownerGone, plan.ChooseOwner). Everything else keeps them
// alive: a lapsed node may be alive and only slow to renew; its members
// are imported and waited for once its exporter acknowledges the new
// epoch (until then they cannot be: unfenced).
func (o *ownership) ownershipView(v *clusterView) *clusterView {
	if len(o.lapsed) == 0 {
		return v
	}
	ov := *v
	ov.Nodes = slices.Clone(v.Nodes)
	for i := range ov.Nodes {
		if _, ok := o.lapsed[ov.Nodes[i].Name]; ok {
			ov.Nodes[i].Alive = false
		}
	}
	return &ov
}

// unfenced is plan.View.Unfenced for the volumes v holds: member nodes
// in lapseWindow whose drive exporter has not acknowledged the volume's
// held epoch (a dead owner's alive key outlives its owner key by
// node_lease_ttl - owner_lease_ttl; a node cut off from etcd cannot
// acknowledge). A volume whose acknowledgements cannot be read is left
// out: its members are waited for as on any other node.
func (o *ownership) unfenced(ctx context.Context, cli *clientv3.Client, v *clusterView) map[string][]string {
	if len(o.lapsed) == 0 {
		return nil
	}
	out := map[string][]string{}
	for _, vol := range v.Volumes {
		e, held := v.Held[vol.UUID]
		if !held {
			continue
		}
		var nodes []string
		for _, m := range vol.Members {
			if _, lapsed := o.lapsed[m.Node]; lapsed && m.Node != o.self && !slices.Contains(nodes, m.Node) {
				nodes = append(nodes, m.Node)
			}
		}
		if len(nodes) == 0 {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, etcdTimeout)
		acks, err := fence.Acks(actx, cli, vol.UUID)
		cancel()
		if err != nil {
			o.log.Warn("fence acknowledgements unreadable; waiting for every member", "volume", vol.Name, "err", err)
			continue
		}
		for _, n := range nodes {
			if a, ok := acks[n]; !ok || a.Epoch != e {
				out[vol.UUID] = append(out[vol.UUID], n)
			}
		}
	}
	return out
}

// cannotExport says whether this node exports nothing (clusterauth.go),
// so it must not acquire vol although the record names it: it could
// serve vol to nobody. Logged once per volume until it can export.
func (o *ownership) cannotExport(v *clusterView, vol model.Volume) bool {
	n, ok := v.node(o.self)
	if !ok || !n.CannotExport() {
		clear(o.notAcquired)
		return false
	}
	if !o.notAcquired[vol.UUID] {
		o.notAcquired[vol.UUID] = true
		o.log.Error("volume names this node as owner, which exports nothing: not acquired; a node that can export takes it over",
			"volume", vol.Name, "reason", n.ExportsWhy)
	}
	return true
}

// alive says whether node is alive in v.
func alive(v *clusterView, node string) bool {
	n, ok := v.node(node)
	return ok && n.Alive
}

// ownerGone says whether vol (no owner key now) is to be taken over: its
// record owner is dead or unset, or the key has been absent for
// ownerGrace while this node watched (a kick is scheduled for then).
func (o *ownership) ownerGone(v *clusterView, vol model.Volume) bool {
	if vol.Owner == "" || !alive(v, vol.Owner) {
		return true
	}
	since, ok := o.absent[vol.UUID]
	if !ok {
		o.absent[vol.UUID] = time.Now()
		time.AfterFunc(ownerGrace, o.kick)
		return false
	}
	return time.Since(since) >= ownerGrace
}

// takeOver makes this node vol's owner: the record's owner becomes this
// node (compare-and-swap: only if it still names the owner this node saw),
// then the key is acquired. A racing node that wins either step wins the
// volume.
func (o *ownership) takeOver(ctx context.Context, cli *clientv3.Client, s *owner.Session, vol model.Volume) (owner.Epoch, error) {
	t0 := time.Now()
	o.log.Warn("volume has no owner; taking it over", "volume", vol.Name, "uuid", vol.UUID, "record_owner", vol.Owner)
	mctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	_, err := volumes.Modify(mctx, cli, vol.UUID, func(r *model.Volume) error {
		if r.Owner != vol.Owner || r.State != model.VolumeReady {
			return errSkip
		}
		r.Owner = o.self
		return nil
	})
	cancel()
	if errors.Is(err, errSkip) {
		return 0, fmt.Errorf("volume %s: takeover: the record changed meanwhile (another node took it?)", vol.Name)
	}
	if err != nil {
		return 0, fmt.Errorf("volume %s: takeover: %w", vol.Name, err)
	}
	e, err := owner.Acquire(ctx, s, vol.UUID, o.self)
	if err != nil {
		return 0, fmt.Errorf("volume %s: takeover: %w", vol.Name, err)
	}
	o.log.Warn("took the volume over", "volume", vol.Name, "epoch", e, "previous_owner", vol.Owner, "seconds", time.Since(t0).Seconds())
	return e, nil
}

// fence waits (bounded) until every live exporter of vol's drives but
// skip has acknowledged epoch e, once per epoch.
func (o *ownership) fence(ctx context.Context, cli *clientv3.Client, vol model.Volume, e owner.Epoch, skip string) error {
	if o.fenced[vol.UUID] == e {
		return nil
	}
	var exporters []string
	for _, m := range vol.Members {
		if m.Node != o.self && m.Node != skip && !slices.Contains(exporters, m.Node) {
			exporters = append(exporters, m.Node)
		}
	}
	t0 := time.Now()
	fctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	err := o.wait(fctx, cli, vol.UUID, uint64(e), exporters)
	cancel()
	if err != nil {
		return fmt.Errorf("volume %s: storage fence for epoch %d not acknowledged by every live exporter of %v: %w (not run until it is)",
			vol.Name, e, exporters, err)
	}
	o.log.Info("storage fence acknowledged", "volume", vol.Name, "epoch", e, "exporters", exporters, "seconds", time.Since(t0).Seconds())
	o.fenced[vol.UUID] = e
	return nil
}

func (o *ownership) forget(uuid string) { delete(o.fenced, uuid) }
