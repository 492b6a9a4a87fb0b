package clusterplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/scope"
	"github.com/fabraid/fabraid/internal/cluster/viewcache"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// The data-plane loop in a cluster
//
// Each reconcile (every interval, and on etcd watch events of the volume,
// node, liveness and host-key keys) reads the cluster's view from etcd and
// converges this node to it:
//
//	view (registry, volumes, host keys, statuses)
//	  -> exporter.Reconcile       this node's drives that are members of volumes owned elsewhere
//	  -> importer.Reconcile       members of the volumes this node owns (member UUID; drive export while creating)
//	  -> volmgr.ReconcileCluster  create / start / export / consume
//	  -> ownership: hand-overs drained, resigned, finished (move.go)
//	  -> etcd: created volumes become ready (member UUIDs), deleted ones go, VolumeStatus and consumer paths published
//
// Desired state lives in etcd and every mutation goes through it: volume
// create writes the record (state creating) from any node, the owner
// formats the members and marks it ready; delete sets state deleting and
// the owner stops, wipes and removes it.

// clusterLoop is the daemon's data-plane state in a cluster; its reconcile
// runs one at a time (the daemon's reconcile loop), its view is read by
// the API concurrently.
type clusterLoop struct {
	x  *exporter.Exporter
	im *importer.Importer

	mu        sync.Mutex
	view      *clusterView // last view read, nil before the first
	lease     clientv3.LeaseID
	leaseCli  *clientv3.Client
	leaseLost chan struct{}
	published map[string]model.VolumeStatus
	watched   *clientv3.Client         // the client the watch and the view's copy run on
	cache     *viewcache.Cache         // the view's copy (viewcache), fed by the watch
	interest  *scope.Interest          // what the last view made this node's business; nil before it
	acks      map[string]fenceAck      // fence acknowledgements written, by volume (fence.go)
	holders   map[string]plan.OwnerKey // last owner key seen per volume (fence.go)
	paths     *model.NodePaths         // consumer paths last published, on pathsOn
	pathsOn   clientv3.LeaseID
	req       requestWorker // req.go
	// exports, exportsWhy: this node's export state (auth.go).
	exports, exportsWhy string
	// tls, tlsWhy, tlsDecided: this node's drive ports' TLS (tls.go).
	tls, tlsWhy string
	tlsDecided  bool
	// pathRefused: why this node makes no new connection to a consumed
	// volume, by volume (tls.go).
	pathRefused map[[16]byte]string
	// targetTLS and hostTLS probe this node's TLS support as target
	// (given nvmet's feature probe) and as host (tls.go).
	targetTLS func(nvmetTLS bool) fabrictls.Support
	hostTLS   func() fabrictls.Support
	// leaderMoved: when this node last handed its etcd leadership away
	// (leader.go).
	leaderMoved time.Time
	// downSince, downWarned, reprotectWhy: re-protection
	// (reprotect.go).
	downSince    map[string]time.Time
	downWarned   map[string]bool
	reprotectWhy map[string]string
	// resigned is told of every owner key deletion the watch sees
	// (acquire.go); nil: nobody.
	resigned func(uuid string)
}

func newClusterLoop() *clusterLoop {
	c := &clusterLoop{x: exporter.New(""), im: importer.New(), published: map[string]model.VolumeStatus{}, targetTLS: fabrictls.TargetSupport}
	c.hostTLS = func() fabrictls.Support { return fabrictls.HostSupport(c.im.Host) }
	return c
}

// clusterView is the cluster as one reconcile sees it: plan's View and
// the owners' published statuses.
type clusterView struct {
	plan.View
	Status map[string]model.VolumeStatus
	Moves  map[string]volumes.StoredMove // by volume UUID (move.go)
	Paths  map[string]model.NodePaths    // consumer paths by node
	// Rekeys are the other nodes' announced host key rotations, by host
	// NQN: HostKeys has their pending keys (withHostRotations).
	Rekeys exporter.Rekeys
	// reader is what the view was read through (in a pass, the node's
	// copy once it has this node's last owner-key write: sync.go); the
	// pass reads the owner keys and fence acknowledgements through it
	// as well. nil: etcd.
	reader clientv3.KV
}

// keysKV is the reader of the pass's owner keys: v's reader, or cli.
func (v *clusterView) keysKV(cli *clientv3.Client) clientv3.KV {
	if v.reader == nil {
		return cli
	}
	return v.reader
}

// readView reads the view; a node without storage addresses serves
// NVMe/TCP on its cluster address.
func readView(ctx context.Context, kv clientv3.KV, self string) (*clusterView, error) {
	ns, err := registry.List(ctx, kv)
	if err != nil {
		return nil, err
	}
	v := &clusterView{View: plan.View{Self: self, Nodes: ns}, reader: kv}
	for i, n := range v.Nodes {
		if len(n.StorageAddresses) == 0 && n.ClusterAddress != "" {
			v.Nodes[i].StorageAddresses = []string{n.ClusterAddress}
		}
	}
	if v.Volumes, err = volumes.List(ctx, kv); err != nil {
		return nil, err
	}
	if v.HostKeys, err = volumes.HostKeys(ctx, kv); err != nil {
		return nil, err
	}
	if v.Status, err = volumes.ListStatus(ctx, kv); err != nil {
		return nil, err
	}
	if v.Moves, err = volumes.ListMoves(ctx, kv); err != nil {
		return nil, err
	}
	if v.Paths, err = volumes.ListPaths(ctx, kv); err != nil {
		return nil, err
	}
	return v, nil
}

// node returns the registry record of name.
func (v *clusterView) node(name string) (model.NodeStatus, bool) {
	for _, n := range v.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return model.NodeStatus{}, false
}

// selfDomain is this node's failure domain: its registry record's
// (failure_domain, default the node name), the node name without one.
func (v *clusterView) selfDomain() string {
	if n, ok := v.node(v.Self); ok && n.Domain != "" {
		return n.Domain
	}
	return v.Self
}

// owned are the volumes whose record names this node as owner: it
// publishes their status ("stopped" while it runs no engine), and runs
// only those it also holds the owner key of (View.Held).
func (v *clusterView) owned() []model.Volume {
	var out []model.Volume
	for _, vol := range v.Volumes {
		if vol.Owner == v.Self {
			out = append(out, vol)
		}
	}
	return out
}

// volume finds a volume by name or UUID.
func (v *clusterView) volume(ref string) (model.Volume, bool) {
	for _, vol := range v.Volumes {
		if vol.Name == ref || vol.UUID == ref {
			return vol, true
		}
	}
	return model.Volume{}, false
}

// InCluster says whether the node belongs to a cluster (state on disk or
// external etcd), whether or not its membership is up yet. Such a node
// never assembles volumes from its local superblock scan.
func (pl *Plane) InCluster() bool {
	if pl.cluster.InCluster() {
		return true
	}
	_, err := os.Stat(filepath.Join(pl.cfg.StateDir, "cluster", "state.json"))
	return err == nil
}

// ErrNoEtcd: the node is in a cluster but its etcd client is not up.
var ErrNoEtcd = errors.New("cluster: etcd is not reachable yet (membership starting); volumes are left as they are meanwhile")

// watch keeps this node's copy of the cluster's keys (viewcache: the
// passes read their view from it) and kicks a reconcile on every change
// that concerns this node (kicks), after the copy has it; one per client.
// It returns the view's reader for cli, the copy's (which reads etcd until
// its first list is done). A new client gets a new copy at once; the old
// one's runs on until that client is closed.
func (c *clusterLoop) watch(cli *clientv3.Client, self string, kick func()) clientv3.KV {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watched == cli {
		return c.cache.KV(cli)
	}
	c.watched, c.cache = cli, viewcache.New(keys.Prefix)
	cache := c.cache
	go func() {
		cache.Run(cli.Ctx(), cli, func(evs []*clientv3.Event, resync bool) {
			if resync {
				kick()
				return
			}
			for _, ev := range evs {
				if u, ok := ownerDeleted(ev); ok && c.resigned != nil {
					c.resigned(u)
				}
				if c.kicks(self, ev) {
					kick()
				}
			}
		})
		c.mu.Lock()
		if c.watched == cli {
			c.watched = nil // a later reconcile watches again
		}
		c.mu.Unlock()
	}()
	return cache.KV(cli)
}

// kicks says whether a watch event asks for a reconcile now: a change
// that concerns this node by the last view (scope.Interest; before the
// first view, every change of a key the loop reads). Statuses and paths
// never kick: every node rewrites its own as it reconciles.
func (c *clusterLoop) kicks(self string, ev *clientv3.Event) bool {
	e := scope.Event{Key: string(ev.Kv.Key), Value: ev.Kv.Value, Delete: ev.Type == clientv3.EventTypeDelete}
	c.mu.Lock()
	in := c.interest
	c.mu.Unlock()
	if in == nil {
		in = &scope.Interest{Self: self}
	}
	return in.Kicks(e)
}

// interestOf is this node's interest in view v: scope.Of, and the
// volumes it holds the owner key of whatever their records say.
func interestOf(v *clusterView) *scope.Interest {
	moves := make([]model.Move, 0, len(v.Moves))
	for _, m := range v.Moves {
		moves = append(moves, m.Move)
	}
	in := scope.Of(v.Self, v.Volumes, moves)
	for u := range v.Held {
		in.Volumes[u] = true
	}
	return &in
}

// localDrives are this node's claimed drives: by claim id for the
// importer, with their devices for the exporter.
func localDrives(stateDir string) (map[string]string, []exporter.Drive) {
	ds, err := drive.System(stateDir).ClaimedDrives()
	if err != nil {
		return nil, nil
	}
	m := map[string]string{}
	var xs []exporter.Drive
	for _, d := range ds {
		m[d.ID] = d.Path
		xs = append(xs, exporter.Drive{ID: d.ID, Path: d.Path})
	}
	return m, xs
}

// managerPlan is the volume manager's plan: the owned volumes being
// created or ready with their members' devices, every node as an allowed
// host (a volume with an attach list admits its attached nodes only),
// this node's addresses, every ready volume attached to this node as a
// consumer.
func managerPlan(v *clusterView, imp plan.Import, paths map[[16]byte][]string) volmgr.ClusterPlan {
	var p volmgr.ClusterPlan
	if self, ok := v.node(v.Self); ok {
		p.Addresses = self.StorageAddresses
		p.CntlIDMin, p.CntlIDMax = volmgr.CntlIDRange(self.CntlIDBlock)
	}
	for _, n := range v.Nodes {
		if n.HostNQN != "" {
			p.Hosts = append(p.Hosts, volmgr.ExportHost{NQN: n.HostNQN, Secret: v.HostKeys[n.Name]})
		}
	}
	p.Attached = plan.AttachedHosts(v.View)
	for _, c := range plan.ConsumedBy(v.View, v.Self) {
		p.Consumers = append(p.Consumers, volmgr.Consumer{UUID: c.UUID, Addresses: c.Addresses})
	}
	for _, o := range imp.Volumes {
		vol := o.Volume
		if vol.State == model.VolumeDeleting {
			continue
		}
		pv := volmgr.PlannedVolume{UUID: o.UUID, Name: vol.Name, State: vol.State, Members: paths[o.UUID], OwnerDomain: v.selfDomain(),
			Epoch: v.Held[vol.UUID]}
		pv.Config.K, pv.Config.M, pv.Config.Groups, pv.Config.ChunkSize = vol.K, vol.M, vol.Groups, vol.ChunkSize
		pv.Config.MemberSize, pv.Config.JournalBytes, pv.Config.FixedParity = vol.MemberSize, vol.JournalBytes, vol.FixedParity
		for _, m := range vol.Members {
			pv.Config.Domains = append(pv.Config.Domains, m.Domain)
			if v.MemberGone(vol, m.Node) {
				pv.Gone = append(pv.Gone, m.Slot)
			}
		}
		p.Volumes = append(p.Volumes, pv)
	}
	return p
}
