package clusterplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/viewcache"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Reconcile is one pass of the data-plane loop (loop.go).
func (pl *Plane) Reconcile(ctx context.Context) error {
	cli := pl.cluster.Client()
	if cli == nil {
		return ErrNoEtcd
	}
	c := pl.loop
	viewKV := viewcache.Since(c.watch(cli, pl.cfg.NodeName, pl.kick), pl.owners.wrote.Load())
	pl.requestHook(cli) // engine operation requests (req.go)
	self := pl.cfg.NodeName
	hs, ok := pl.cluster.HostSecret()
	if !ok {
		return ErrNoEtcd // registration makes it
	}
	secret := nvmf.SecretText(hs.Reveal())
	rctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	v, err := readView(rctx, viewKV, self)
	if err == nil {
		err = pl.readCtrlKeys(rctx, cli, v) // auth.go
	}
	cancel()
	if err != nil {
		return err
	}
	v.HostKeys[self] = secret // what this node presents, even before etcd has it
	// Before ownership: a node that exports nothing holds no volume.
	refused := pl.exportRefusal(ctx, v)
	var errs []error
	own, err := pl.owners.reconcile(ctx, cli, v)
	if err != nil {
		errs = append(errs, err)
	}
	v.Held = own.Held // only these are imported and assembled here
	pl.owners.noteTargets(v, own.Prepare, own.Held)
	v.Unfenced = pl.owners.unfenced(ctx, cli, v)
	c.mu.Lock()
	c.view, c.interest = v, interestOf(v)
	c.mu.Unlock()

	local, drives := localDrives(pl.cfg.StateDir)
	xres, err := pl.reconcileExports(ctx, cli, v, drives)
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range xres.Problems {
		pl.log.Warn("drive exporter", "problem", p)
	}
	if len(xres.Fenced) > 0 {
		pl.log.Info("drive exporter: fenced old owners", "drives", xres.Fenced)
	}
	imp, prep := plan.ImporterInputPreparing(v.View, pl.mgr.HostIdentity(), local, own.Prepare)
	pl.importTLS(&imp.Input, v) // tls.go
	ires, err := c.im.Reconcile(ctx, imp.Input)
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range ires.Problems {
		pl.log.Warn("member importer", "problem", p)
	}
	errs = append(errs, pl.prepared(ctx, cli, v, prep, ires)...) // planned moves to this node (handover.go)
	paths := imp.Paths(ires)
	mp := managerPlan(v, imp, paths)
	mp.Secret, mp.Auth, mp.Stop, mp.Drain = secret, xres.Auth, own.Stop, own.Keep
	withCtrlKeys(&mp, v) // auth.go
	pl.volumeTLS(&mp, v) // tls.go
	if refused != nil {
		mp.Refused = refused.Error()
	}
	res, err := pl.mgr.ReconcileCluster(ctx, mp)
	if err != nil {
		errs = append(errs, err)
	}
	if res.Retry {
		time.AfterFunc(consumerRetry, pl.kick) // a new owner's export may be up by then
	}
	pl.owners.release = func(ctx context.Context, vol model.Volume) error { return pl.releaseImports(ctx, imp, vol) }
	errs = append(errs, pl.owners.afterReconcile(ctx, cli, v, own, pl.mgr)...) // hand-overs (move.go)
	errs = append(errs, pl.drainOwned(ctx, cli, v, own.Held)...)               // a drained node's moves (drain.go)
	errs = append(errs, pl.reprotect(ctx, cli, v)...)                          // members of down nodes (reprotect.go)
	pl.balanceEtcdLeader(ctx, v)                                               // leader.go
	wctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	if err := pl.publishPaths(wctx, cli, res.Paths); err != nil {
		errs = append(errs, err)
	}
	for u, ms := range res.Created {
		if err := markReady(wctx, cli, u, ms); err != nil {
			errs = append(errs, err)
		} else {
			pl.log.Info("volume created; ready", "uuid", volid.Format(u))
		}
	}
	errs = append(errs, pl.replaceMembers(ctx, cli, imp, paths)...) // req.go
	errs = append(errs, pl.deleteOwned(ctx, cli, imp, paths)...)
	if err := pl.publishStatus(wctx, cli, v); err != nil {
		errs = append(errs, err)
	}
	if err := pl.publishRotatedKey(wctx); err != nil { // auth.go
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// consumerRetry is how soon a reconcile whose consumer connection failed
// runs again (after a takeover the new owner exports within seconds).
const consumerRetry = time.Second

// errSkip leaves a record unchanged in volumes.Modify.
var errSkip = errors.New("no change")

// markReady records the member UUIDs of created volume u and makes it ready.
func markReady(ctx context.Context, kv clientv3.KV, u [16]byte, ms [][16]byte) error {
	_, err := volumes.Modify(ctx, kv, volid.Format(u), func(v *model.Volume) error {
		if v.State != model.VolumeCreating || len(v.Members) != len(ms) {
			return errSkip
		}
		for i := range v.Members {
			v.Members[i].UUID = volid.Format(ms[i])
		}
		v.State = model.VolumeReady
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		return fmt.Errorf("volume %s: mark ready: %w", volid.Format(u), err)
	}
	return nil
}

// deleteOwned carries out the deletes of volumes this node owns: stop the
// engine, wipe the members, remove the record.
func (pl *Plane) deleteOwned(ctx context.Context, kv clientv3.KV, imp plan.Import, paths map[[16]byte][]string) []error {
	var errs []error
	for _, o := range imp.Volumes {
		if o.Volume.State != model.VolumeDeleting {
			continue
		}
		if err := pl.mgr.DeletePlanned(ctx, o.UUID, paths[o.UUID]); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := volumes.Delete(ctx, kv, o.Volume.UUID); err != nil {
			errs = append(errs, err)
			continue
		}
		pl.log.Info("volume deleted", "volume", o.Volume.Name, "uuid", o.Volume.UUID)
	}
	return errs
}

// publishStatus writes the status of every volume this node owns when it
// changed (or is not in etcd), on the loop's lease: gone when this node
// stops renewing it.
func (pl *Plane) publishStatus(ctx context.Context, cli *clientv3.Client, v *clusterView) error {
	c := pl.loop
	lease, err := c.ensureLease(ctx, cli)
	if err != nil {
		return err
	}
	var errs []error
	for _, vol := range v.owned() {
		if vol.State == model.VolumeDeleting {
			continue
		}
		s := pl.volumeStatus(vol)
		c.mu.Lock()
		s.Reprotect = c.reprotectWhy[vol.UUID]
		c.mu.Unlock()
		if u, err := volid.ParseUUID(vol.UUID); err == nil && pl.mgr.Running(u) && s.State != "stopped" && s.State != "waiting" {
			s.Epoch, s.Exported = v.Held[vol.UUID], pl.mgr.Exported(u)
		}
		c.mu.Lock()
		old, ok := c.published[vol.UUID]
		c.mu.Unlock()
		if _, there := v.Status[vol.UUID]; ok && there && sameStatus(old, s) {
			continue
		}
		s.Updated = time.Now().UTC()
		if err := volumes.PutStatus(ctx, cli, lease, s); err != nil {
			errs = append(errs, err)
			continue
		}
		c.mu.Lock()
		c.published[vol.UUID] = s
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// publishPaths writes this node's consumer controllers (paths, from the
// manager's reconcile) when they changed, on the status lease: the old
// owner of a hand-over waits for them (move.go).
func (pl *Plane) publishPaths(ctx context.Context, cli *clientv3.Client, paths map[[16]byte][]volmgr.ConsumerPath) error {
	c := pl.loop
	lease, err := c.ensureLease(ctx, cli)
	if err != nil {
		return err
	}
	np := model.NodePaths{Version: model.PathsVersion, Node: pl.cfg.NodeName, Volumes: map[string][]model.Path{}}
	for u, ps := range paths {
		var out []model.Path
		for _, p := range ps {
			out = append(out, model.Path{Address: p.Address, State: p.State})
		}
		slices.SortFunc(out, func(a, b model.Path) int { return strings.Compare(a.Address+a.State, b.Address+b.State) })
		np.Volumes[volid.Format(u)] = out
	}
	c.mu.Lock()
	same := c.paths != nil && c.pathsOn == lease && reflect.DeepEqual(*c.paths, np)
	c.mu.Unlock()
	if same {
		return nil
	}
	if err := volumes.PutPaths(ctx, cli, lease, np); err != nil {
		return err
	}
	c.mu.Lock()
	c.paths, c.pathsOn = &np, lease
	c.mu.Unlock()
	return nil
}

func sameStatus(a, b model.VolumeStatus) bool {
	a.Updated, b.Updated = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// volumeStatus is what this owner says about vol.
func (pl *Plane) volumeStatus(vol model.Volume) model.VolumeStatus {
	s := model.VolumeStatus{UUID: vol.UUID, Name: vol.Name, Owner: vol.Owner}
	in, err := pl.mgr.Info(vol.UUID)
	switch {
	case vol.State == model.VolumeCreating:
		s.State = model.VolumeCreating
		if err == nil {
			s.Error = in.Error
		}
		return s
	case err != nil:
		s.State, s.Error = "stopped", err.Error()
		return s
	}
	s.State, s.Error, s.Task = in.State, in.Error, in.Task
	s.ChunkSize, s.Journal, s.JournalBytes, s.OwnerJournal = in.ChunkSize, in.Journal, in.JournalBytes, in.OwnerJournal
	if in.Progress != nil {
		s.Progress = in.Progress.Percent
	}
	if in.LastTask != nil {
		s.LastTask, _ = json.Marshal(in.LastTask) // for --wait on other nodes (req.go)
	}
	if r := in.Rebuild; r != nil && r.Partial {
		s.ResyncBytes = r.Bytes
	}
	for _, m := range in.Members {
		ms := model.VolumeMemberStatus{Slot: m.Slot, Role: m.Role, Failure: m.Failure}
		if m.Slot < len(vol.Members) {
			ms.Node = vol.Members[m.Slot].Node
		}
		s.Members = append(s.Members, ms)
	}
	return s
}

// ensureLease returns the lease the statuses are written on, granting a
// new one (kept alive in the background) when there is none, it was lost
// or the client changed; a new lease republishes every status.
func (c *clusterLoop) ensureLease(ctx context.Context, cli *clientv3.Client) (clientv3.LeaseID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease != 0 && c.leaseCli == cli {
		select {
		case <-c.leaseLost:
		default:
			return c.lease, nil
		}
	}
	g, err := cli.Grant(ctx, statusLeaseTTL)
	if err != nil {
		return 0, fmt.Errorf("volume status lease: %w", err)
	}
	ka, err := cli.KeepAlive(context.Background(), g.ID)
	if err != nil {
		return 0, fmt.Errorf("volume status lease: %w", err)
	}
	lost := make(chan struct{})
	go func() {
		for range ka {
		}
		close(lost)
	}()
	c.lease, c.leaseCli, c.leaseLost = g.ID, cli, lost
	clear(c.published)
	return g.ID, nil
}

// statusLeaseTTL is the lease of the published volume statuses (seconds):
// a dead owner's statuses vanish this long after its last renewal.
const statusLeaseTTL = 15
