package clusterplane

import (
	"context"
	"slices"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/store"
)

// The etcd leader away from volume owners
//
// A volume's owner key lives on the owner's lease, and a takeover waits
// until that lease expires at the etcd leader. When the owner's node is
// also the etcd leader and dies, the group first elects a new leader
// (an election timeout and a vote), and the new leader restarts every
// lease's full TTL plus the election timeout (etcd without lease
// checkpoints): the failover takes TTL + two election timeouts longer
// than when a follower dies (docs/cluster.md, "Timing"). So the member
// that leads and owns volumes hands the leadership to the voting,
// healthy member that owns the fewest, when that one owns fewer than it:
// a transfer costs one round trip without a leader (raft's TimeoutNow),
// and the choice is stable (the new leader owns the fewest, so it keeps
// the leadership until ownership changes).

// leaderMoveEvery bounds how often a node hands the leadership away.
const leaderMoveEvery = 30 * time.Second

// leaderTransferee returns the member self (the leader) should hand the
// leadership to, or nil: the voting, healthy member other than self whose
// node is alive and owns the fewest ready volumes (then the first name),
// when it owns fewer than self. Pure.
func leaderTransferee(self string, members []model.MemberStatus, nodes []model.NodeStatus, vols []model.Volume) *model.MemberStatus {
	owned := map[string]int{}
	for _, v := range vols {
		if v.State == model.VolumeReady && v.Owner != "" {
			owned[v.Owner]++
		}
	}
	alive := map[string]bool{}
	for _, n := range nodes {
		alive[n.Name] = n.Alive
	}
	var best *model.MemberStatus
	for i := range members {
		m := &members[i]
		if m.Name == self || m.Learner || !m.Healthy || !alive[m.Name] {
			continue
		}
		if best == nil || owned[m.Name] < owned[best.Name] || owned[m.Name] == owned[best.Name] && m.Name < best.Name {
			best = m
		}
	}
	if best == nil || owned[best.Name] >= owned[self] {
		return nil
	}
	return best
}

// balanceEtcdLeader hands this node's etcd leadership to
// leaderTransferee's member, at most every leaderMoveEvery.
func (pl *Plane) balanceEtcdLeader(ctx context.Context, v *clusterView) {
	if !pl.cluster.LeadsEtcd() || !slices.ContainsFunc(v.Volumes, func(vol model.Volume) bool { return vol.Owner == v.Self }) {
		return
	}
	c := pl.loop
	c.mu.Lock()
	recent := time.Since(c.leaderMoved) < leaderMoveEvery
	c.mu.Unlock()
	if recent {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ms, err := store.Members(mctx, pl.cluster.Client(), time.Second)
	if err != nil {
		return
	}
	to := leaderTransferee(v.Self, ms, v.Nodes, v.Volumes)
	if to == nil {
		return
	}
	c.mu.Lock()
	c.leaderMoved = time.Now()
	c.mu.Unlock()
	t0 := time.Now()
	if err := pl.cluster.MoveEtcdLeader(mctx, *to); err != nil {
		pl.log.Warn("etcd leadership not handed to a member that owns fewer volumes", "to", to.Name, "err", err)
		return
	}
	pl.log.Info("etcd leadership handed to a member that owns fewer volumes (an owner's death then needs no election)",
		"to", to.Name, "seconds", time.Since(t0).Seconds())
}
