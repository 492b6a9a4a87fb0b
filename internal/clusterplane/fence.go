package clusterplane

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/fence"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/exporter"
)

// fenceAck is an acknowledgement this node has written (fence.Ack).
type fenceAck struct {
	lease clientv3.LeaseID
	epoch uint64
	owner string
}

// reconcileExports is the drive exporter's pass: it reads the owner keys,
// exports each volume's members here to the key's holder only (while a
// volume has no key, to the last holder this process saw: exportHolders;
// nobody when it saw none), and after the exporter has applied that and read it
// back, acknowledges "fenced for epoch E" for each of those volumes
// (docs/cluster.md, "Storage fence"). Nothing is exported before the
// owner keys are read; an apply error writes no acknowledgement.
// Acknowledgements are on the loop's lease and rewritten when it changes.
func (pl *Plane) reconcileExports(ctx context.Context, cli *clientv3.Client, v *clusterView, drives []exporter.Drive) (exporter.Result, error) {
	c := pl.loop
	rctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	hs, err := owner.List(rctx, v.keysKV(cli)) // an ack names the epoch it read: a stale one only delays the owner's fence
	cancel()
	if err != nil {
		return exporter.Result{}, fmt.Errorf("drive exporter: %w", err)
	}
	ks := exportHolders(c, v, hs)
	in := pl.exporterInput(v, drives, ks)
	res, err := c.x.Reconcile(ctx, in)
	if err != nil {
		return res, fmt.Errorf("%w (no fence acknowledged)", err)
	}
	wctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	lease, err := c.ensureLease(wctx, cli)
	if err != nil {
		return res, fmt.Errorf("drive exporter: fence acknowledgements: %w", err)
	}
	if c.acks == nil {
		c.acks = map[string]fenceAck{}
	}
	self := pl.cfg.NodeName
	for _, vol := range in.Volumes {
		a := fenceAck{lease: lease, epoch: vol.Epoch}
		if vol.Epoch != 0 {
			a.owner = ks[vol.UUID].Node
		}
		if c.acks[vol.UUID] == a {
			continue
		}
		if err := fence.Ack(wctx, cli, lease, vol.UUID, self, a.epoch, a.owner); err != nil {
			return res, fmt.Errorf("drive exporter: %w", err)
		}
		c.acks[vol.UUID] = a
		pl.log.Info("drive exporter: fence acknowledged", "volume", vol.UUID, "epoch", a.epoch, "owner", a.owner)
	}
	return res, nil
}

// exporterInput is the drive exporter's input for this pass: the drives
// of the volumes of v exported to their holders ks, with this node's
// settings and the announced host key rotations (no fence for those).
func (pl *Plane) exporterInput(v *clusterView, drives []exporter.Drive, ks map[string]plan.OwnerKey) exporter.Input {
	in := handoverExports(plan.FencedExporterInput(v.View, drives, ks), v, ks) // planned moves (handover.go)
	in.HostNQN = pl.mgr.HostNQN()
	in.AllowUnauthenticated = !pl.cfg.Cluster.RequireAuth
	in.TLS = pl.TLSPorts() // decided this pass (exportRefusal)
	in.Rekeys = v.Rekeys   // hostrotate.go
	return in
}

// exportHolders is whom each volume's drives here are exported to: its
// owner key's holder, or, while it has none, the last holder this process
// saw. A key lapses when its holder's session ends (a node dead, cut off,
// or only slow to renew): that holder froze its engines first, and no
// other node may write before every exporter has acknowledged the next
// epoch, which re-points the drives (the storage fence). So the gap needs
// no teardown, and a holder that lapses and acquires again keeps its
// member connections (cutting them would fail its in-flight member I/O
// and the members with it). After a restart nothing was seen: nobody.
func exportHolders(c *clusterLoop, v *clusterView, hs map[string]owner.Key) map[string]plan.OwnerKey {
	if c.holders == nil {
		c.holders = map[string]plan.OwnerKey{}
	}
	ks := make(map[string]plan.OwnerKey, len(v.Volumes))
	for _, vol := range v.Volumes {
		if h, ok := hs[vol.UUID]; ok {
			c.holders[vol.UUID] = plan.OwnerKey{Node: h.Node, Epoch: uint64(h.Epoch)}
		}
		if k, ok := c.holders[vol.UUID]; ok {
			ks[vol.UUID] = k
		}
	}
	for u := range c.holders {
		if !slices.ContainsFunc(v.Volumes, func(vol model.Volume) bool { return vol.UUID == u }) {
			delete(c.holders, u)
		}
	}
	return ks
}
