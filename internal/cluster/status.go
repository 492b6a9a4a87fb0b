package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/rbac"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/store"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// Status is the cluster as one node sees it (package model).
type Status = model.Status

// statusReadTimeout bounds the reads of Status that need a quorum (the
// registry, the volumes): without one, a linearizable read waits for a
// leader that may never come.
const statusReadTimeout = 5 * time.Second

// Status reads the members, their health, the node registry and the
// volumes with their owners' statuses. When the registry cannot be read
// in statusReadTimeout (no quorum; a member may still believe in a leader
// for a while after losing it) it returns the members as this node sees
// them and says in Problem why the rest is missing, instead of waiting.
func (n *Node) Status(ctx context.Context) (Status, error) {
	n.mu.Lock()
	cli, st, phase := n.cli, n.st, n.phase
	n.mu.Unlock()
	if st == nil {
		return Status{}, ErrNotInCluster
	}
	s := Status{Version: StateVersion, Cluster: st.Cluster, CAFingerprint: st.CAFingerprint, Etcd: "embedded", Node: n.o.Name}
	if len(n.o.External) > 0 {
		s.Etcd = "external"
	}
	if cli == nil {
		if phase == "" {
			phase = "starting"
		}
		s.Problem = "this node's cluster membership is not up: " + phase
		return s, nil
	}
	ms, err := store.Members(ctx, cli, 2*time.Second)
	if err != nil {
		return Status{}, err
	}
	s.Members = ms
	s.Healthy = true
	for _, m := range ms {
		if m.Leader {
			s.Leader = m.Name
		}
		if !m.Learner && !m.Healthy {
			s.Healthy = false
		}
	}
	if s.Leader == "" {
		s.Healthy = false
	}
	if err := n.readRecords(ctx, cli, &s); err != nil {
		if ctx.Err() != nil {
			return Status{}, err
		}
		s.Healthy = false
		s.Problem = fmt.Sprintf("nodes and volumes cannot be read: etcd needs a quorum for them (%d of %d voting members answer): %v",
			answering(s.Members), voters(s.Members), err)
	}
	return s, nil
}

// readRecords fills the registry and volume parts of s, each read bounded
// by statusReadTimeout.
func (n *Node) readRecords(ctx context.Context, cli *clientv3.Client, s *Status) error {
	ctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
	defer cancel()
	var err error
	if s.Nodes, err = registry.List(ctx, cli); err != nil {
		return err
	}
	vols, err := volumes.List(ctx, cli)
	if err != nil {
		return err
	}
	vs, err := volumes.ListStatus(ctx, cli)
	if err != nil {
		return err
	}
	s.Volumes = volumes.Summary(vols, vs)
	return nil
}

func voters(ms []model.MemberStatus) int {
	n := 0
	for _, m := range ms {
		if !m.Learner {
			n++
		}
	}
	return n
}

func answering(ms []model.MemberStatus) int {
	n := 0
	for _, m := range ms {
		if !m.Learner && m.RaftIndex > 0 {
			n++
		}
	}
	return n
}

// Leave takes this node out of its cluster: its registry record goes, its
// etcd member (if any) is removed, and its cluster state is deleted. It
// refuses to remove the last etcd member or to shrink two members to one
// unless force.
func (n *Node) Leave(ctx context.Context, force bool) error {
	n.life.Lock()
	defer n.life.Unlock()
	if n.cli == nil || n.st == nil {
		return ErrNotInCluster
	}
	var id uint64
	if n.srv != nil {
		id = n.srv.ID()
		if _, err := store.CheckRemove(ctx, n.cli, id); err != nil && !force {
			return err
		}
	}
	n.stopHeartbeat() // revoke the lease first: the node is dead at once
	if err := registry.Delete(ctx, n.cli, n.o.Name); err != nil {
		return err
	}
	if n.srv != nil {
		if err := n.removeSelf(ctx, id, force); err != nil {
			return err
		}
	}
	n.o.Log.Info("cluster: left", "cluster", n.st.Cluster, "node", n.o.Name)
	n.shutdown()
	n.mu.Lock()
	n.st = nil
	n.mu.Unlock()
	if len(n.o.External) == 0 {
		if err := os.RemoveAll(n.o.Dir); err != nil {
			return fmt.Errorf("cluster: remove state: %w", err)
		}
	}
	return nil
}

// Remove takes a dead node out of the cluster: its etcd member (if any)
// and its registry record. A node that is alive is refused: it should
// leave by itself (fabraid cluster leave on it).
func (n *Node) Remove(ctx context.Context, name string) error {
	n.mu.Lock()
	cli := n.cli
	n.mu.Unlock()
	if cli == nil {
		return ErrNotInCluster
	}
	if name == n.o.Name {
		return fmt.Errorf("cluster: %s is this node; use fabraid cluster leave", name)
	}
	ns, ok, err := registry.Get(ctx, cli, name)
	if err != nil {
		return err
	}
	if ok && ns.Alive {
		return fmt.Errorf("cluster: %w: %s (since %s); run fabraid cluster leave on it, or stop it and wait for its lease to expire", ErrAlive, name, ns.AliveSince.Format(time.RFC3339))
	}
	// A node may be an etcd member without a record (it died while
	// joining): find it by member name too.
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("cluster: member list: %w", err)
	}
	for _, m := range ml.Members {
		if m.Name == name || (ok && fmt.Sprintf("%x", m.ID) == ns.EtcdMember) {
			if err := store.Remove(ctx, cli, m.ID, false); err != nil {
				return memberOnly(name, err)
			}
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("cluster: no node %s", name)
	}
	if err := registry.Delete(ctx, cli, name); err != nil {
		return memberOnly(name, err)
	}
	// Its certificate stays valid: without its etcd user it can do
	// nothing in etcd any more (package rbac).
	if err := rbac.RemoveNode(ctx, cli, name); err != nil {
		n.o.Log.Warn("cluster: node removed, but its etcd user was not (its certificate may still read etcd)", "node", name, "err", err)
	}
	n.o.Log.Info("cluster: node removed", "node", name)
	return nil
}

// removeSelf removes this node's etcd member through the other members:
// a member that applies its own removal stops, and a request it was
// serving can fail with "server stopped" although the removal committed.
func (n *Node) removeSelf(ctx context.Context, id uint64, force bool) error {
	ml, err := n.cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("cluster: member list: %w", err)
	}
	var others []string
	for _, m := range ml.Members {
		if m.ID != id && !m.IsLearner {
			others = append(others, m.ClientURLs...)
		}
	}
	cli := n.cli
	if len(others) > 0 {
		t, err := n.files.ClientTLS()
		if err != nil {
			return err
		}
		if cli, err = store.Connect(others, t, n.o.Log); err != nil {
			return err
		}
		defer cli.Close()
	}
	if err := store.Remove(ctx, cli, id, force); err != nil && !(force && errors.Is(err, store.ErrShrink)) {
		return err
	}
	return nil
}

// memberOnly says, when etcd refused the removal of node name for the
// caller's role (package rbac), that only a member may remove a node.
func memberOnly(name string, err error) error {
	if errors.Is(err, rpctypes.ErrPermissionDenied) || strings.Contains(err.Error(), rpctypes.ErrPermissionDenied.Error()) {
		return fmt.Errorf("cluster: remove %s: %w (only an etcd member may remove another node: run fabraid cluster remove on a member)", name, err)
	}
	return err
}
