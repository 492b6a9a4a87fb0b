package clusterplane

import (
	"context"
	"fmt"
	"maps"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// Re-protection (docs/cluster.md, "Re-protection")
//
// The owner of a volume decides it, as it decides every engine operation
// of the volume: in each reconcile, for each volume it owns and runs, a
// member whose node has been down for down_out_interval moves to a free
// drive (plan.Reprotect: placement's failure-domain rule), by the same
// etcd transaction as `fabraid volume replace` (volumes.SubmitReplace:
// the record's slot names the new drive, with no member UUID until the
// engine has replaced it); the owner's own reconcile then imports the
// drive and replaces and rebuilds the slot (replaceMembers). A member
// the engine still counts active (no I/O reached it since) is failed
// first. One slot at a time. The clock is the cluster's: the first owner
// that sees a node of its volumes' members dead records since when in
// etcd (registry.MarkDown: only while the node's alive key is absent,
// the first time kept), every owner times the node from that record, so
// a new owner or a restarted fabraidd goes on where the last one was; a
// node seen alive has its record cleared (registry.ClearDown: only while
// its alive key exists). Without a record (not written yet, or refused:
// a cluster whose etcd roles predate the down/ prefix until `fabraid
// cluster enable-rbac` runs again) the clock is this node's first sight,
// as before: never shorter than a whole interval from this node's view.
// The recorded time is the marking node's clock: skew between nodes
// shortens or lengthens the interval by as much. A node back before then
// resyncs partially as after any outage; one back after it finds its old
// drives in no volume (free again, never wiped: placement formats them
// when it uses them). What re-protection waits for, or why it cannot
// run, is in the volume's status (volume show, cluster status).

// reprotect runs re-protection for the volumes this node owns and holds,
// and keeps each one's reason for the status.
func (pl *Plane) reprotect(ctx context.Context, cli *clientv3.Client, v *clusterView) []error {
	c := pl.loop
	now := time.Now()
	c.mu.Lock()
	c.downSince = downSinceUpdate(c.downSince, v.Nodes, now)
	local := maps.Clone(c.downSince)
	c.mu.Unlock()
	pl.recordDown(ctx, cli, v, local)
	down := downClock(local, v.Nodes)
	interval := time.Duration(pl.cfg.Cluster.DownOutInterval) * time.Second
	why := map[string]string{}
	var errs []error
	for _, vol := range v.owned() {
		if _, held := v.Held[vol.UUID]; !held {
			continue
		}
		r := plan.Reprotect(v.View, vol, pl.volumeStatus(vol), down, now, interval)
		why[vol.UUID] = r.Why
		if r.Fail {
			if err := pl.mgr.Fail(vol.UUID, r.Member.Slot, false); err != nil {
				errs = append(errs, fmt.Errorf("volume %s: re-protection: fail slot %d (node %s down): %w", vol.Name, r.Member.Slot, r.Member.Node, err))
				why[vol.UUID] = r.Why + ": " + err.Error()
				continue
			}
			pl.log.Warn("re-protecting: failed a member of a down node before its replace", "volume", vol.Name, "slot", r.Member.Slot,
				"member", r.Member.Node+":"+r.Member.Drive, "down_for", now.Sub(down[r.Member.Node]).Round(time.Second).String())
			pl.kick()
			continue
		}
		if !r.Replace {
			continue
		}
		if err := pl.submitReprotect(ctx, cli, v, vol, r.Member, now.Sub(down[vol.Members[r.Member.Slot].Node])); err != nil {
			errs = append(errs, err)
			why[vol.UUID] = err.Error()
		}
	}
	c.mu.Lock()
	c.reprotectWhy = why
	c.mu.Unlock()
	return errs
}

// downSinceUpdate returns since with every node of nodes that is not
// alive mapped to when it was first seen so (now for a node new to the
// map) and every alive or unknown node removed.
func downSinceUpdate(since map[string]time.Time, nodes []model.NodeStatus, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range nodes {
		if n.Alive {
			continue
		}
		t, ok := since[n.Name]
		if !ok {
			t = now
		}
		out[n.Name] = t
	}
	return out
}

// downClock returns since when each dead node has been down: the
// cluster's record (NodeStatus.DownSince) where there is one, else this
// node's first sight (local).
func downClock(local map[string]time.Time, nodes []model.NodeStatus) map[string]time.Time {
	out := maps.Clone(local)
	for _, n := range nodes {
		if !n.Alive && !n.DownSince.IsZero() {
			out[n.Name] = n.DownSince
		}
	}
	return out
}

// downRecords returns the dead nodes whose down record this node should
// write (no record yet, and watched: they hold members of a volume this
// node owns) and the alive nodes whose record it should clear.
func downRecords(nodes []model.NodeStatus, watched func(node string) bool) (mark, clear []string) {
	for _, n := range nodes {
		switch {
		case n.Alive && !n.DownSince.IsZero():
			clear = append(clear, n.Name)
		case !n.Alive && n.DownSince.IsZero() && watched(n.Name):
			mark = append(mark, n.Name)
		}
	}
	return mark, clear
}

// recordDown writes and clears the down records downRecords names, a
// marked node with this node's first sight of it (local). A refused
// write is logged once per node and otherwise ignored: the clock falls
// back to this node's own.
func (pl *Plane) recordDown(ctx context.Context, cli *clientv3.Client, v *clusterView, local map[string]time.Time) {
	members := map[string]bool{}
	for _, vol := range v.owned() {
		for _, m := range vol.Members {
			members[m.Node] = true
		}
	}
	mark, clear := downRecords(v.Nodes, func(n string) bool { return members[n] })
	sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	for _, n := range mark {
		if ok, err := registry.MarkDown(sctx, cli, n, v.Self, local[n]); err != nil {
			pl.warnDownRecord(n, err)
		} else if ok {
			pl.log.Info("recorded a node as down: the re-protection clock runs from here on every node", "node", n, "since", local[n].UTC().Format(time.RFC3339))
		}
	}
	for _, n := range clear {
		if _, err := registry.ClearDown(sctx, cli, n); err != nil {
			pl.warnDownRecord(n, err)
		}
	}
}

// warnDownRecord logs a refused down-record write, once per node.
func (pl *Plane) warnDownRecord(node string, err error) {
	c := pl.loop
	c.mu.Lock()
	first := !c.downWarned[node]
	if c.downWarned == nil {
		c.downWarned = map[string]bool{}
	}
	c.downWarned[node] = true
	c.mu.Unlock()
	if first {
		pl.log.Warn("could not update the node's down record in etcd; the re-protection clock is this node's own (after an upgrade with RBAC on, run fabraid cluster enable-rbac again)",
			"node", node, "err", err)
	}
}

// submitReprotect moves slot m.Slot of vol to m's drive in etcd (the
// record's slot must still be what this reconcile read, and this node
// its owner) with a replace request, which this node's reconcile then
// carries out.
func (pl *Plane) submitReprotect(ctx context.Context, cli *clientv3.Client, v *clusterView, vol model.Volume, m model.VolumeMember, downFor time.Duration) error {
	old := vol.Members[m.Slot]
	r := model.Request{ID: volumes.NewRequestID(), Volume: vol.UUID, Op: "replace", Slot: m.Slot, Node: m.Node, Drive: m.Drive,
		RequestedBy: v.Self, Created: time.Now().UTC()}
	sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	_, err := volumes.SubmitReplace(sctx, cli, r, func(cur *model.Volume) error {
		switch {
		case cur.Owner != v.Self:
			return fmt.Errorf("%w: volume %q is owned by %s now", ErrVolumeState, cur.Name, cur.Owner)
		case m.Slot >= len(cur.Members) || cur.Members[m.Slot] != old:
			return fmt.Errorf("%w: volume %q slot %d changed meanwhile", ErrVolumeState, cur.Name, m.Slot)
		}
		cur.Members[m.Slot] = m
		return nil
	})
	if err != nil {
		return fmt.Errorf("volume %s: re-protection of slot %d (node %s down): %w", vol.Name, m.Slot, old.Node, err)
	}
	pl.log.Warn("re-protecting: a member of a down node moves to a free drive; the slot is rebuilt there",
		"volume", vol.Name, "slot", m.Slot, "old", old.Node+":"+old.Drive, "new", m.Node+":"+m.Drive,
		"down_for", downFor.Round(time.Second).String(), "request", r.ID)
	pl.kick()
	return nil
}
