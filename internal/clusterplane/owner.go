package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/fence"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	decision "github.com/fabraid/fabraid/internal/clusterplane/ownership"
	"github.com/fabraid/fabraid/internal/volid"
)

// Volume ownership in fabraidd (docs/cluster.md, "Failover")
//
// Every node runs one owner.Session (lease owner_lease_ttl, default
// owner.DefaultTTL) while it is in a cluster; its OnFence freezes every
// engine of the node. Each reconcile, before anything is imported or
// assembled, the node settles the ownership of every volume record in
// three steps, the shape of a controller:
//
//   - gather (facts): the owner keys (one list), the record, liveness
//     (alive keys; lapsed owner sessions, noteLapses), this node's
//     storage fence, export and hand-over state, the node failover
//     picks (plan.ChooseOwner), how long the key has been absent;
//   - decide: ownership.Decide (internal/clusterplane/ownership), pure,
//     table-tested: acquire, take over, fence, keep, drain, resign,
//     hold, stop, finish, prepare or wait, with the reason of a wait or
//     hold;
//   - execute: the etcd calls (Acquire, the takeover's record CAS, the
//     storage fence's wait) and the plan for the volume manager
//     (ownerPlan: Held, Stop, Keep, Drain, Resign, Finish, Undrain);
//     the hand-over's drain, resign and finish run after the manager's
//     reconcile (afterReconcile, move.go).
//
// A node that holds no key for a volume never assembles it: plan's
// ImporterInput imports only View.Held, and the manager plans only those.

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

	// wrote is the revision of this node's last acquisition: a pass
	// reads its view from the copy only once the copy has it.
	wrote atomic.Int64

	mu     sync.Mutex
	cli    *clientv3.Client
	sess   *owner.Session
	fenced map[string]owner.Epoch // held on sess and storage-fenced at that epoch
	absent map[string]time.Time   // first seen without an owner key while its record owner was alive
	lapses *owner.Lapses          // other nodes' owner keys and sessions at the last list
	lapsed map[string]time.Time   // nodes whose owner session was seen to end, and when
	lost   time.Time              // when the last session fenced (for the log)
	// published is the session lease this node published (owner.Publish).
	published clientv3.LeaseID
	// handing are the volumes this node hands over (move.go).
	handing map[string]*handover
	// notAcquired: volumes whose record names this node as owner, not
	// acquired because it exports nothing (logged once each).
	notAcquired map[string]bool
	decided     map[string]decision.Action // the last decision per volume (logged when it changes)
	// movesSeen: when this node first saw each volume's move record
	// (by its Asked time): the start of its PrepareWait.
	movesSeen map[string]moveSeen
	// release ends this node's imports of a volume's members before it
	// resigns a planned move (Plane.releaseImports over this pass's
	// import plan); nil: not released.
	release func(context.Context, model.Volume) error
	early   earlyAcquires // a planned move's acquire on the resign (acquire.go)
}

// moveSeen is when this node first saw the move record asked at asked.
type moveSeen struct{ asked, seen time.Time }

func newOwnership(self string, ttl time.Duration, log *slog.Logger, freeze func() error, kick func()) *ownership {
	return &ownership{self: self, ttl: ttl, log: log, freeze: freeze, kick: kick, wait: fence.Wait,
		fenced: map[string]owner.Epoch{}, absent: map[string]time.Time{},
		lapses: owner.NewLapses(self), lapsed: map[string]time.Time{}, handing: map[string]*handover{},
		notAcquired: map[string]bool{}, decided: map[string]decision.Action{}, movesSeen: map[string]moveSeen{}}
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
	// Prepare: volumes this node is a planned move's target of while
	// another node holds the key: their members are imported, nothing
	// runs (they are in Stop too).
	Prepare []string
}

// reconcile settles the ownership of every volume of v (see the comment
// at the top): it gathers each volume's facts, asks decision.Decide and
// carries the action out (execute). The reads before the loop (session,
// owner keys, lapses) and the bookkeeping in facts are the only state.
func (o *ownership) reconcile(ctx context.Context, cli *clientv3.Client, v *clusterView) (ownerPlan, error) {
	p := ownerPlan{Held: map[string]uint64{}, Drain: map[string]owner.Epoch{}, Resign: map[string]owner.Epoch{}}
	s, err := o.session(ctx, cli)
	if err != nil {
		return p, fmt.Errorf("owner session: %w", err)
	}
	o.adoptEarly()
	// The owner keys come from v's reader, the node's copy when it is
	// synced and has this node's last acquisition (o.wrote), so they may
	// be behind etcd. That is safe: every acquisition is a
	// compare-and-swap against etcd (owner.Acquire: only if no key
	// exists; a takeover first CASes the record), so a decision made on
	// a stale read can lose a race, never give a volume a second owner;
	// a key this node holds is gone only by its own resign or its
	// session's end, which froze its engines first.
	var errs []error
	if err := o.publish(ctx, cli, s); err != nil {
		errs = append(errs, err) // its keys' lapses are asked of etcd meanwhile (owner.Lapses)
	}
	gctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	snap, err := owner.Read(gctx, v.keysKV(cli))
	cancel()
	if err != nil {
		return p, errors.Join(append(errs, err)...)
	}
	ks := snap.Keys
	mine := owner.LeaseString(s.Lease())
	if err := o.noteLapses(ctx, cli, snap); err != nil {
		errs = append(errs, err)
	}
	ov := o.ownershipView(v)
	if o.canExport(v) {
		clear(o.notAcquired)
	}
	records := map[string]bool{}
	for i, vol := range v.Volumes {
		records[vol.UUID] = true
		if _, perr := volid.ParseUUID(vol.UUID); perr != nil {
			continue
		}
		f := o.facts(v, ov, vol, ks, mine)
		a := decision.Decide(f)
		o.note(vol, f, a)
		if err := o.execute(ctx, cli, s, v, i, f, a, &p); err != nil {
			errs = append(errs, err)
		}
	}
	// Keys of this lease whose volume record is gone (deleted here).
	for uuid, k := range ks {
		if records[uuid] || k.Lease != mine {
			continue
		}
		a := decision.Decide(decision.Facts{Self: o.self, Deleted: true, Key: decision.HeldHere, KeyNode: k.Node, KeyEpoch: uint64(k.Epoch)})
		if a.Kind == decision.Resign {
			if err := owner.Resign(ctx, cli, uuid, owner.Epoch(a.Epoch)); err != nil {
				errs = append(errs, err)
			}
		}
		o.forget(uuid)
	}
	for uuid := range o.movesSeen {
		if !records[uuid] {
			delete(o.movesSeen, uuid)
		}
	}
	return p, errors.Join(errs...)
}

// facts gathers what decision.Decide needs of vol: the record, its
// owner key in ks (mine is this node's current lease), liveness in v and
// in ov (the takeover's view: lapsed nodes dead), this node's fence,
// export and hand-over state. It keeps the bookkeeping that belongs to
// the observation: the fenced epoch is forgotten with the key, and the
// key's absence under a live record owner is timed (OwnerGrace; a kick
// is scheduled for its end).
func (o *ownership) facts(v, ov *clusterView, vol model.Volume, ks map[string]owner.Key, mine string) decision.Facts {
	f := decision.Facts{Self: o.self, RecordOwner: vol.Owner, Ready: vol.State == model.VolumeReady,
		OwnerAlive: alive(v, vol.Owner), Now: time.Now(), CanExport: o.canExport(v)}
	_, f.OwnerLapsed = o.lapsed[vol.Owner]
	k, has := ks[vol.UUID]
	switch {
	case !has:
	case k.Lease == mine && k.Node == o.self:
		f.Key = decision.HeldHere
	case k.Node == o.self:
		f.Key = decision.HeldPrevious
	default:
		f.Key = decision.HeldElsewhere
	}
	if has {
		f.KeyNode, f.KeyEpoch = k.Node, uint64(k.Epoch)
	}
	if f.Key == decision.HeldHere {
		f.FencedEpoch = uint64(o.fenced[vol.UUID])
	} else {
		o.forget(vol.UUID)
	}
	switch {
	case decision.WatchAbsence(f):
		if _, ok := o.absent[vol.UUID]; !ok {
			o.absent[vol.UUID] = f.Now
			time.AfterFunc(decision.OwnerGrace, o.kick)
		}
		f.AbsentSince = o.absent[vol.UUID]
	case f.Key != decision.NoKey || vol.Owner == o.self:
		delete(o.absent, vol.UUID)
	default:
		f.AbsentSince = o.absent[vol.UUID] // owner dead or lapsed: gone whatever the clock says
	}
	f.FailoverChoice = plan.ChooseOwner(ov.View, vol)
	f.Move = o.moveFacts(v, vol.UUID, f.Now)
	if h := o.handing[vol.UUID]; h != nil {
		f.Handover = decision.Draining
		if h.frozen {
			f.Handover = decision.Frozen
			f.MayUnexport, _, _ = o.unexportFacts(v, vol, f.KeyNode, f.KeyEpoch, h, f.Now)
		}
	}
	return f
}

// note logs a volume's decision when it changed since the last pass
// (waits and holds with their reason).
func (o *ownership) note(vol model.Volume, f decision.Facts, a decision.Action) {
	last, ok := o.decided[vol.UUID]
	o.decided[vol.UUID] = a
	if ok && last.Kind == a.Kind && last.Why == a.Why {
		return
	}
	o.log.Debug("ownership", "volume", vol.Name, "action", a.Kind.String(), "epoch", a.Epoch, "why", a.Why.String(),
		"key", f.Key.String(), "key_node", f.KeyNode, "record_owner", f.RecordOwner)
}

// execute carries out a, the decision for v.Volumes[i] on facts f, into p
// and against etcd.
func (o *ownership) execute(ctx context.Context, cli *clientv3.Client, s *owner.Session, v *clusterView, i int, f decision.Facts, a decision.Action, p *ownerPlan) error {
	vol := v.Volumes[i]
	u, _ := volid.ParseUUID(vol.UUID)
	if a.DropHandover {
		delete(o.handing, vol.UUID)
	}
	e := owner.Epoch(a.Epoch)
	switch a.Kind {
	case decision.Wait:
		if a.Why == decision.CannotExport && !o.notAcquired[vol.UUID] {
			o.notAcquired[vol.UUID] = true
			n, _ := v.node(o.self)
			o.log.Error("volume names this node as owner, which exports nothing: not acquired; a node that can export takes it over",
				"volume", vol.Name, "reason", n.ExportsWhy)
		}
		return nil
	case decision.Stop:
		p.Stop = append(p.Stop, u)
		return nil
	case decision.Prepare:
		p.Stop = append(p.Stop, u)
		p.Prepare = append(p.Prepare, vol.UUID)
		return nil
	case decision.Resign:
		p.Resign[vol.UUID] = e
		p.Keep = append(p.Keep, u)
		return nil
	case decision.Hold, decision.Finish:
		h := o.handing[vol.UUID]
		if a.Why == decision.KeyElsewhere {
			p.Keep = append(p.Keep, u)
			return nil
		}
		o.handedOver(v, vol, f, h, a)
		if a.Kind == decision.Finish {
			p.Stop = append(p.Stop, u)
			p.Finish = append(p.Finish, vol.UUID)
		} else {
			p.Keep = append(p.Keep, u)
		}
		return nil
	case decision.Drain:
		if a.BeginHandover {
			o.handing[vol.UUID] = &handover{epoch: e}
		}
		p.Drain[vol.UUID] = e
	case decision.Acquire:
		if err := o.voidRelease(ctx, cli, v, vol); err != nil {
			return err
		}
		var err error
		if e, a.Fence, err = o.acquire(ctx, cli, s, vol, a.Clean); err != nil {
			return fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		o.noteWrite(e)
		o.log.Info("acquired volume", "volume", vol.Name, "epoch", e)
	case decision.TakeOver:
		if err := o.voidRelease(ctx, cli, v, vol); err != nil {
			return err
		}
		var err error
		if e, err = o.takeOver(ctx, cli, s, vol); err != nil {
			return err
		}
		// This pass's view has the record as written: the drive
		// exporter unexports this node's own members (tearing down
		// the old owner's controllers to them) before the importer
		// opens them.
		v.Volumes[i].Owner = o.self
	}
	// Acquire, TakeOver, Fence, Keep, Drain: run at e once fenced.
	if a.Fence {
		if err := o.fence(ctx, cli, vol, e, a.SkipAck); err != nil {
			return err // not run yet; an engine stays as it is
		}
	}
	p.Held[vol.UUID] = uint64(e)
	if a.Undrain && o.handing[vol.UUID] != nil {
		// Held again at a newer epoch (failover chose this node, or the
		// record came back): the frozen engine thaws at e.
		delete(o.handing, vol.UUID)
		p.Undrain = append(p.Undrain, vol.UUID)
	}
	return nil
}

// lapseWindow is how long a node whose owner session ended counts as dead
// for ownership while its alive key (node_lease_ttl, 10 s) lasts: its
// volumes are taken over, and its members are not waited for nor
// connected to until its exporter acknowledges the new epoch (unfenced).
// Longer than the node lease TTL, so a dead node's alive key is gone
// by then; a node that is alive again is treated as alive after it.
const lapseWindow = 30 * time.Second

// publish publishes s (owner.Publish) unless it is already.
func (o *ownership) publish(ctx context.Context, cli *clientv3.Client, s *owner.Session) error {
	if o.published == s.Lease() {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	if err := owner.Publish(pctx, cli, s, o.self); err != nil {
		return err
	}
	o.published = s.Lease()
	return nil
}

// noteLapses records the nodes whose owner session ended since the last
// list (its published session key vanished with its lease, and its owner
// keys with it, as opposed to a key resigned under a live session), as
// the node's copy shows it: etcd is asked only of the keys of nodes that
// published no session (owner.Lapses). ownershipView counts those in
// lapseWindow as dead for the takeover decision. A lapsed owner froze
// its engines before its key could expire (owner.Session's guard), so its
// volumes can be taken over at its key's expiry (owner TTL) instead of
// its alive key's, and a lapsed node holding no key is not chosen for a
// takeover meanwhile.
func (o *ownership) noteLapses(ctx context.Context, cli *clientv3.Client, snap owner.Snapshot) error {
	ended, unknown := o.lapses.Note(snap)
	lctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	asked, err := owner.EndedHolders(lctx, cli, unknown)
	cancel()
	for _, node := range append(ended, asked...) {
		if _, known := o.lapsed[node]; !known {
			o.log.Warn("owner session of a node ended (its lease expired or was revoked)", "node", node)
			o.lapsed[node] = time.Now()
			time.AfterFunc(lapseWindow, o.kick)
		}
	}
	for _, node := range snap.Holders(o.self) {
		delete(o.lapsed, node) // it holds a key on a live session again
	}
	for node, at := range o.lapsed {
		if time.Since(at) >= lapseWindow {
			delete(o.lapsed, node)
			continue
		}
	}
	return err
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
		acks, err := fence.Acks(actx, v.keysKV(cli), vol.UUID)
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

// canExport says whether this node exports volumes (auth.go): one
// that exports nothing must not acquire a volume although the record
// names it: it could serve it to nobody.
func (o *ownership) canExport(v *clusterView) bool {
	n, ok := v.node(o.self)
	return !ok || !n.CannotExport()
}

// alive says whether node is alive in v.
func alive(v *clusterView, node string) bool {
	n, ok := v.node(node)
	return ok && n.Alive
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
	o.noteWrite(e)
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

// noteWrite records an acquisition at epoch e (its revision): the next
// passes read the copy only once it has e, so a held key never looks
// absent to its holder.
func (o *ownership) noteWrite(e owner.Epoch) {
	for {
		w := o.wrote.Load()
		if int64(e) <= w || o.wrote.CompareAndSwap(w, int64(e)) {
			return
		}
	}
}

// unexportFacts decides for a frozen hand-over whether its export may go
// now (mayUnexport), without side effects: servedNow says the new owner
// was first seen serving in this pass.
func (o *ownership) unexportFacts(v *clusterView, vol model.Volume, keyNode string, keyEpoch uint64, h *handover, now time.Time) (ok bool, why string, servedNow bool) {
	f := handoverFacts{Self: o.self, RecordOwner: vol.Owner, KeyNode: keyNode, KeyEpoch: keyEpoch, Now: now}
	if st, ok := v.Status[vol.UUID]; ok {
		f.Status = &st
	}
	hh := *h
	if servedElsewhere(hh, f) {
		var addrs []string
		if n, ok := v.node(o.self); ok {
			addrs = n.StorageAddresses
		}
		f.Pending = pendingConsumers(v, vol.UUID, addrs)
		if hh.served.IsZero() {
			hh.served, servedNow = now, true
		}
	}
	ok, why = mayUnexport(hh, f)
	return ok, why, servedNow
}

// handedOver carries out the side of a frozen hand-over's Hold or Finish
// that is not in the plan: notes when the new owner was first seen
// serving, logs the export's removal, and asks for a reconcile soon
// while it waits (statuses and paths do not kick the loop).
func (o *ownership) handedOver(v *clusterView, vol model.Volume, f decision.Facts, h *handover, a decision.Action) {
	if h == nil {
		return
	}
	_, why, servedNow := o.unexportFacts(v, vol, f.KeyNode, f.KeyEpoch, h, f.Now)
	if servedNow {
		h.served = f.Now
		var pending []string
		if n, ok := v.node(o.self); ok {
			pending = pendingConsumers(v, vol.UUID, n.StorageAddresses)
		}
		o.log.Info("hand-over: the new owner serves; waiting for every consumer's path to it", "volume", vol.Name,
			"owner", vol.Owner, "epoch", f.KeyEpoch, "inaccessible_seconds", f.Now.Sub(h.since).Seconds(), "pending", pending)
	}
	if a.Kind == decision.Finish {
		o.log.Info("hand-over: removing this node's export", "volume", vol.Name, "why", why)
		return
	}
	time.AfterFunc(time.Second, o.kick)
}
