package scalesim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/scope"
	"github.com/fabraid/fabraid/internal/cluster/viewcache"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// node is one simulated fabraidd: its own etcd client, registry record,
// alive key (node lease), owner session, a watch of the cluster prefix
// and a reconcile that reads the whole view and acquires or takes over
// volumes as the daemon's ownership does. What the daemon does with the
// kernel (exports, imports, engines) is left out.
type node struct {
	name string
	cli  *clientv3.Client
	hb   *registry.Heartbeat
	sess *owner.Session
	st   *stats

	kick chan struct{}
	mu   sync.Mutex
	held map[string]owner.Epoch // volumes whose owner key this node holds
	dead bool
	// lapses and lapsed are the daemon's noteLapses: other nodes' keys
	// and published sessions at the last list, and the nodes whose owner
	// session was seen to end (counted as dead for takeovers, before
	// their alive key expires).
	lapses *owner.Lapses
	lapsed map[string]bool
	// published is the session lease the node published (owner.Publish).
	published clientv3.LeaseID
	// interest is what the last view made this node's business: the
	// changes that kick a reconcile (fabraidd's, internal/cluster/scope).
	interest atomic.Pointer[scope.Interest]
	// cache is the node's copy of the cluster's keys, which its passes
	// read their view from (fabraidd's, internal/cluster/viewcache).
	cache *viewcache.Cache
	// wrote is the revision of the node's last acquisition: it reads the
	// copy only once the copy has it (viewcache.Since).
	wrote atomic.Int64
}

func startNode(ctx context.Context, e *Etcd, name string, drives int, c Config, st *stats) (*node, error) {
	cli, err := e.Client()
	if err != nil {
		return nil, err
	}
	n := &node{name: name, cli: cli, st: st, kick: make(chan struct{}, 1), held: map[string]owner.Epoch{}, cache: viewcache.New(keys.Prefix),
		lapses: owner.NewLapses(name), lapsed: map[string]bool{}}
	rec := registry.Node{Name: name, Domain: name, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:" + name, ClusterAddress: "127.0.0.1",
		StorageAddresses: []string{"10.0.0.1"}, Exports: model.ExportsDHCHAP}
	for i := range drives {
		rec.Drives = append(rec.Drives, model.Drive{ID: fmt.Sprintf("%s-d%02d", name, i), Serial: fmt.Sprintf("S%s%02d", name, i), Size: 3_840_000_000_000})
	}
	if _, err := registry.Register(ctx, cli, rec, time.Now()); err != nil {
		cli.Close()
		return nil, err
	}
	if n.hb, err = registry.StartHeartbeat(ctx, cli, name, c.NodeLeaseTTL, 1, time.Now()); err != nil {
		cli.Close()
		return nil, err
	}
	if n.sess, err = owner.NewSession(ctx, cli, owner.Options{TTL: c.OwnerTTL}); err != nil {
		cli.Close()
		return nil, err
	}
	if err := owner.Publish(ctx, cli, n.sess, name); err != nil {
		cli.Close()
		return nil, err
	}
	n.published = n.sess.Lease()
	n.watchFence(n.sess)
	return n, nil
}

// run reconciles every interval (first after a random part of it) and
// on every watch event that concerns the node (kicks), one at a time, until ctx ends or
// the node is killed.
func (n *node) run(ctx context.Context, interval, first time.Duration, events *eventCount) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kick := func() {
		select {
		case n.kick <- struct{}{}:
		default:
		}
	}
	go n.cache.Run(wctx, n.cli, func(evs []*clientv3.Event, resync bool) {
		if resync {
			kick()
		}
		for _, ev := range evs {
			events.add(1)
			if n.kicks(ev) {
				kick()
			}
		}
	})
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(interval)
		case <-n.kick:
		}
		if n.isDead() {
			return
		}
		n.reconcile(ctx)
	}
}

// reconcile reads the view as fabraidd does (the six lists of its
// readView) and acquires the volumes whose record names this node, or
// takes over those whose owner key is gone and whose record owner is
// dead when plan.ChooseOwner picks this node.
func (n *node) reconcile(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !n.renewSession(rctx) {
		return
	}
	n.publish(rctx)
	t0 := time.Now()
	h0 := n.cache.Hits()
	kv := viewcache.Since(n.cache.KV(n.cli), n.wrote.Load())
	v, err := readView(rctx, kv, n.name)
	n.st.read(time.Since(t0), err)
	if n.cache.Hits()-h0 == viewReads {
		n.st.copyReads.Add(1)
	}
	if err != nil {
		return
	}
	in := scope.Of(n.name, v.Volumes, nil)
	n.interest.Store(&in)
	snap, err := owner.Read(rctx, kv) // acquisitions stay CASes against etcd (fabraidd's ownership)
	if err != nil {
		n.st.read(0, err)
		return
	}
	ks := snap.Keys
	n.noteLapses(rctx, snap)
	for i := range v.Nodes {
		if n.lapsed[v.Nodes[i].Name] {
			v.Nodes[i].Alive = false
		}
	}
	for _, vol := range v.Volumes {
		if vol.State != model.VolumeReady {
			continue
		}
		k, has := ks[vol.UUID]
		n.mu.Lock()
		_, mine := n.held[vol.UUID]
		n.mu.Unlock()
		switch {
		case has && k.Node == n.name && mine, has:
			continue
		case vol.Owner == n.name:
			n.acquire(rctx, vol.UUID)
		case !alive(v, vol.Owner) && plan.ChooseOwner(v, vol) == n.name:
			n.takeOver(rctx, vol)
		}
	}
}

// renewSession replaces a fenced owner session (its lease not renewed in
// time: the daemon freezes its engines and starts a new session, as
// here), forgetting the keys held on it; false when there is none.
func (n *node) renewSession(ctx context.Context) bool {
	select {
	case <-n.sess.Fenced():
	default:
		return true
	}
	n.st.sessionsLost.Add(1)
	s, err := owner.NewSession(ctx, n.cli, owner.Options{TTL: n.sess.TTL()})
	if err != nil {
		n.st.write(err)
		return false
	}
	n.mu.Lock()
	n.sess, n.held = s, map[string]owner.Epoch{}
	n.mu.Unlock()
	n.watchFence(s)
	return true
}

// publish publishes the node's session unless it is already (the
// daemon's: a failed publish is retried at the next pass; meanwhile the
// others ask etcd about its keys' lapses).
func (n *node) publish(ctx context.Context) {
	if n.published == n.sess.Lease() {
		return
	}
	if err := owner.Publish(ctx, n.cli, n.sess, n.name); err != nil {
		n.st.write(err)
		return
	}
	n.published = n.sess.Lease()
}

// watchFence tells the stats when s fences (its self-fence deadline
// passed: fabraidd's engines freeze then), which comes before its lease
// can expire at the server and so before another node can take its keys.
func (n *node) watchFence(s *owner.Session) {
	go func() {
		<-s.Fenced()
		n.st.fenced(n.name)
	}()
}

// noteLapses marks the nodes whose owner session ended (owner.Lapses:
// from the keys read, etcd asked only of keys of unpublished sessions)
// as lapsed, until they hold a key on a live session again.
func (n *node) noteLapses(ctx context.Context, snap owner.Snapshot) {
	ended, unknown := n.lapses.Note(snap)
	n.st.leaseLookups.Add(int64(len(unknown)))
	asked, _ := owner.EndedHolders(ctx, n.cli, unknown)
	for _, node := range append(ended, asked...) {
		n.lapsed[node] = true
	}
	for _, node := range snap.Holders(n.name) {
		delete(n.lapsed, node)
	}
}

func (n *node) acquire(ctx context.Context, uuid string) {
	e, err := owner.Acquire(ctx, n.sess, uuid, n.name)
	if err != nil {
		if !errors.Is(err, owner.ErrHeld) {
			n.st.write(err)
		}
		return
	}
	n.mu.Lock()
	n.held[uuid] = e
	n.mu.Unlock()
	n.wrote.Store(max(n.wrote.Load(), int64(e)))
	n.st.acquired(uuid, n.name)
	s := model.VolumeStatus{Version: model.VolumeStatusVersion, UUID: uuid, Owner: n.name, State: "optimal", Epoch: uint64(e), Exported: true, Updated: time.Now().UTC()}
	n.st.write(volumes.PutStatus(ctx, n.cli, n.sess.Lease(), s))
}

// takeOver is the daemon's: the record's owner becomes this node
// (compare-and-swap on the owner it saw), then the key is acquired.
func (n *node) takeOver(ctx context.Context, vol model.Volume) {
	_, err := volumes.Modify(ctx, n.cli, vol.UUID, func(r *model.Volume) error {
		if r.Owner != vol.Owner {
			return errLost
		}
		r.Owner = n.name
		return nil
	})
	if errors.Is(err, errLost) {
		return
	}
	if err != nil {
		n.st.write(err)
		return
	}
	n.acquire(ctx, vol.UUID)
}

var errLost = errors.New("another node took the volume over")

// kill stops the node as a power cut does: no revoke, its leases expire.
func (n *node) kill() {
	n.mu.Lock()
	n.dead = true
	n.mu.Unlock()
	n.cli.Close()
}

func (n *node) isDead() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dead
}

// close ends the node cleanly (leases revoked).
func (n *node) close() {
	if n.isDead() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.sess.Close(ctx)
	n.hb.Close(ctx)
	n.cli.Close()
}

func alive(v plan.View, name string) bool {
	for _, n := range v.Nodes {
		if n.Name == name {
			return n.Alive
		}
	}
	return false
}

// readView is internal/clusterplane's readView: the registry with liveness,
// every volume record, host keys, statuses, moves and consumer paths.
// viewReads is how many reads readView makes (a registry transaction and
// five prefix reads).
const viewReads = 6

func readView(ctx context.Context, kv clientv3.KV, self string) (plan.View, error) {
	ns, err := registry.List(ctx, kv)
	if err != nil {
		return plan.View{}, err
	}
	v := plan.View{Self: self, Nodes: ns}
	if v.Volumes, err = volumes.List(ctx, kv); err != nil {
		return plan.View{}, err
	}
	if v.HostKeys, err = volumes.HostKeys(ctx, kv); err != nil {
		return plan.View{}, err
	}
	if _, err = volumes.ListStatus(ctx, kv); err != nil {
		return plan.View{}, err
	}
	if _, err = volumes.ListMoves(ctx, kv); err != nil {
		return plan.View{}, err
	}
	if _, err = volumes.ListPaths(ctx, kv); err != nil {
		return plan.View{}, err
	}
	return v, nil
}

// kicks says whether a watch event asks for a reconcile now: every
// change of a key the loop reads before the first view, then those of
// the node's interest.
func (n *node) kicks(ev *clientv3.Event) bool {
	e := scope.Event{Key: string(ev.Kv.Key), Value: ev.Kv.Value, Delete: ev.Type == clientv3.EventTypeDelete}
	if in := n.interest.Load(); in != nil {
		return in.Kicks(e)
	}
	return scope.Interest{Self: n.name}.Kicks(e)
}
