// Package scalesim runs the control plane of many simulated fabraid nodes
// against a real etcd cluster (three embedded members on loopback) and
// measures what the cluster's size costs: etcd keys, backend size,
// leases, watch events, the latency of the view every node reads each
// reconcile, CPU and memory per node, and the failover of one owner and
// of a rack of nodes (issue 27). Each node runs fabraid's own registry,
// heartbeat, owner session, volume and owner-key code; the kernel side
// (exports, imports, engines) is absent, so a takeover here is the etcd
// part of one: record compare-and-swap and key acquisition. The view
// copies internal/clusterplane's readView, which the simulation cannot
// import without linking the kernel side; which changes kick a reconcile
// is fabraidd's own decision (internal/cluster/scope).
package scalesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/placement"
	"github.com/fabraid/fabraid/internal/volid"
)

// Config is one simulation.
type Config struct {
	Nodes, DrivesPerNode int
	Volumes, K, M        int
	// Reconcile is each node's reconcile period (fabraidd: 10 s).
	Reconcile time.Duration
	// Steady is how long the cluster runs before the failovers are
	// measured.
	Steady time.Duration
	// NodeLeaseTTL (seconds) and OwnerTTL: fabraid's defaults 10 and 6 s.
	NodeLeaseTTL int
	OwnerTTL     time.Duration
	// Rack is how many nodes die at once in the second failover (0:
	// none).
	Rack int
	// Attach is the length of each volume's attach list: its owner and
	// Attach-1 other nodes at random (0: no list, every node consumes
	// every volume).
	Attach int
	// Dir holds the etcd members' data; FreePort gives loopback ports.
	Dir      string
	FreePort func() int
	// Log, when set, narrates the steps.
	Log func(format string, a ...any)
}

// Result is what one simulation measured.
type Result struct {
	Nodes, Volumes          int
	Keys                    int64   // keys under the cluster prefix
	DBBytes                 int64   // largest member backend
	Leases                  int     // leases granted and alive
	Attach                  int     // nodes per attach list (0: every node)
	CreateViewReads         int64   // view reads from the first create until every volume was owned
	ViewReads               int64   // reconciles' view reads in the steady window
	ViewReadsFromCopy       int64   // of those, read wholly from the node's copy (no etcd request)
	ViewP50, ViewP99        float64 // seconds per view read (six range reads)
	WatchEventsPerSec       float64 // events delivered to all nodes' watches, steady window
	ReadErrors, WriteErrors int64
	OwnerSessionsLost       int64   // owner sessions that fenced (lease not renewed in time) and were replaced
	LeaseLookups            int64   // LeaseTimeToLive requests of all nodes, whole run (lapses the keys read did not tell)
	CPUSecondsPerNodePerSec float64 // the whole process (etcd members included) / nodes
	HeapBytesPerNode        int64   // the whole process's heap / nodes
	ReadyAfter              float64 // seconds from the first create to every volume owned
	OneOwnerFailover        float64 // seconds from a power cut to its last volume re-owned
	OneOwnerVolumes         int
	RackFailover            float64 // the same for Rack nodes at once
	RackVolumes             int
	TwoOwners               int // volumes with two different key holders seen (never expected)
	UnownedAtEnd            int // volumes without an owner key at the end
}

// Run runs the simulation and returns what it measured.
func Run(ctx context.Context, c Config) (*Result, error) {
	logf := c.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	e, err := StartEtcd(c.Dir, 3, c.FreePort)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	admin, err := e.Client()
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	st := newStats()
	var events eventCount
	nodes := make([]*node, c.Nodes)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, c.Nodes)
	for i := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, err := startNode(ctx, e, fmt.Sprintf("n%04d", i), c.DrivesPerNode, c, st)
			if err != nil {
				errs <- err
				return
			}
			nodes[i] = n
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("scalesim: start nodes: %w", err)
	}
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	logf("%d nodes registered, alive, owner sessions up", c.Nodes)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, n := range nodes {
		go n.run(rctx, c.Reconcile, time.Duration(rand.Int64N(int64(c.Reconcile))), &events)
	}
	t0 := time.Now()
	uuids, err := createVolumes(ctx, admin, c)
	if err != nil {
		return nil, err
	}
	logf("%d volumes created in %.1f s", len(uuids), time.Since(t0).Seconds())
	if err := st.waitOwned(ctx, uuids, uuids, 5*time.Minute); err != nil {
		n, p50, p99 := st.viewQuantiles()
		return nil, fmt.Errorf("%w (%d view reads, p50 %.2f s, p99 %.2f s; %d reads and %d writes failed; %d owner sessions fenced)",
			err, n, p50, p99, st.readErrs.Load(), st.writeErrs.Load(), st.sessionsLost.Load())
	}
	r := &Result{Nodes: c.Nodes, Volumes: len(uuids), Attach: c.Attach, ReadyAfter: time.Since(t0).Seconds()}
	r.CreateViewReads, _, _ = st.viewQuantiles()
	logf("%d volumes created and owned in %.1f s (%d view reads)", len(uuids), r.ReadyAfter, r.CreateViewReads)

	st.reset()
	ev0, ru0, s0 := events.get(), rusage(), time.Now()
	time.Sleep(c.Steady)
	secs := time.Since(s0).Seconds()
	r.ViewReads, r.ViewP50, r.ViewP99 = st.viewQuantiles()
	r.ViewReadsFromCopy = st.copyReads.Load()
	r.WatchEventsPerSec = float64(events.get()-ev0) / secs
	r.CPUSecondsPerNodePerSec = (rusage() - ru0).Seconds() / secs / float64(c.Nodes)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapBytesPerNode = int64(ms.HeapAlloc) / int64(c.Nodes)
	if err := measureEtcd(ctx, e, admin, r); err != nil {
		return nil, err
	}
	logf("steady %.0f s: %d view reads (%d from the copy), p50 %.3f s, p99 %.3f s; %d keys, db %d bytes, %d leases", secs, r.ViewReads, r.ViewReadsFromCopy, r.ViewP50, r.ViewP99, r.Keys, r.DBBytes, r.Leases)

	// One owner lost, then a rack.
	victim := st.busiestOwner()
	r.OneOwnerFailover, r.OneOwnerVolumes, err = failover(ctx, st, nodes, []string{victim}, uuids)
	if err != nil {
		return nil, err
	}
	logf("owner %s lost: %d volumes re-owned in %.1f s", victim, r.OneOwnerVolumes, r.OneOwnerFailover)
	if c.Rack > 0 && c.Rack < c.Nodes-c.K-c.M {
		var rack []string
		for _, n := range nodes {
			if !n.isDead() && len(rack) < c.Rack {
				rack = append(rack, n.name)
			}
		}
		r.RackFailover, r.RackVolumes, err = failover(ctx, st, nodes, rack, uuids)
		if err != nil {
			return nil, err
		}
		logf("rack of %d lost: %d volumes re-owned in %.1f s", len(rack), r.RackVolumes, r.RackFailover)
	}
	r.ReadErrors, r.WriteErrors, r.OwnerSessionsLost = st.readErrs.Load(), st.writeErrs.Load(), st.sessionsLost.Load()
	r.LeaseLookups = st.leaseLookups.Load()
	r.TwoOwners = st.twoOwners()
	ks, err := owner.List(ctx, admin)
	if err != nil {
		return nil, err
	}
	for _, u := range uuids {
		if _, ok := ks[u]; !ok {
			r.UnownedAtEnd++
		}
	}
	return r, nil
}

// createVolumes places c.Volumes volumes over the registered nodes with
// plan.NewVolume (placement's rule) and writes them ready, as the owner
// would after formatting.
func createVolumes(ctx context.Context, cli clientKV, c Config) ([]string, error) {
	v, err := readView(ctx, cli, "")
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range c.Volumes {
		rec, err := plan.NewVolume(v, placement.Request{Name: fmt.Sprintf("v%04d", i), K: c.K, M: c.M}, newUUID(), time.Now())
		if err != nil {
			return nil, fmt.Errorf("scalesim: place volume %d: %w", i, err)
		}
		rec.State = model.VolumeReady
		rec.Attach = attachList(v, rec.Owner, c.Attach)
		for j := range rec.Members {
			rec.Members[j].UUID = volid.Format(newUUID())
		}
		if err := volumes.Create(ctx, cli, rec); err != nil {
			return nil, fmt.Errorf("scalesim: create volume %d: %w", i, err)
		}
		v.Volumes = append(v.Volumes, rec)
		out = append(out, rec.UUID)
	}
	return out, nil
}

// attachList is owner and n-1 other nodes of the view at random; nil
// (every node) for n 0.
func attachList(v plan.View, owner string, n int) *model.AttachList {
	if n == 0 {
		return nil
	}
	l := &model.AttachList{Nodes: []string{owner}}
	for _, i := range rand.Perm(len(v.Nodes)) {
		if name := v.Nodes[i].Name; len(l.Nodes) < n && name != owner {
			l.Nodes = append(l.Nodes, name)
		}
	}
	slices.Sort(l.Nodes)
	return l
}

// newUUID is a random (version 4) UUID.
func newUUID() volid.UUID {
	var u volid.UUID
	for j := range u {
		u[j] = byte(rand.IntN(256))
	}
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	return u
}

// failover kills the named nodes and returns how long until every volume
// they owned has an owner key again, and how many they owned.
func failover(ctx context.Context, st *stats, nodes []*node, names []string, all []string) (float64, int, error) {
	lost := st.ownedBy(names)
	t0 := time.Now()
	for _, n := range nodes {
		if slices.Contains(names, n.name) {
			n.kill()
		}
	}
	if err := st.waitOwned(ctx, lost, all, 5*time.Minute, names...); err != nil {
		return 0, 0, err
	}
	return time.Since(t0).Seconds(), len(lost), nil
}

func measureEtcd(ctx context.Context, e *Etcd, cli clientKV, r *Result) error {
	resp, err := cli.Get(ctx, keys.Prefix, withPrefixCount()...)
	if err != nil {
		return fmt.Errorf("scalesim: count keys: %w", err)
	}
	r.Keys = resp.Count
	if r.DBBytes, err = e.DBSize(ctx, cli); err != nil {
		return err
	}
	ls, err := cli.Leases(ctx)
	if err != nil {
		return fmt.Errorf("scalesim: leases: %w", err)
	}
	r.Leases = len(ls.Leases)
	return nil
}

// rusage is the process's user + system CPU time.
func rusage() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type eventCount struct{ n atomic.Int64 }

func (e *eventCount) add(n int64) { e.n.Add(n) }
func (e *eventCount) get() int64  { return e.n.Load() }
