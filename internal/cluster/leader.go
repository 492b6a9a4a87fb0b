package cluster

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fabraid/fabraid/internal/cluster/store"
)

// LeadsEtcd reports whether this node's embedded etcd member is the raft
// leader now (false on a node without a member).
func (n *Node) LeadsEtcd() bool {
	n.mu.Lock()
	srv := n.srv
	n.mu.Unlock()
	return srv != nil && srv.Leads()
}

// MoveEtcdLeader hands the raft leadership of this node's member (the
// leader) to the voting member m (store.Members' ID, hex).
func (n *Node) MoveEtcdLeader(ctx context.Context, m store.MemberStatus) error {
	n.mu.Lock()
	srv := n.srv
	n.mu.Unlock()
	if srv == nil {
		return fmt.Errorf("move etcd leader: %w", ErrNotMember)
	}
	id, err := strconv.ParseUint(m.ID, 16, 64)
	if err != nil {
		return fmt.Errorf("move etcd leader to %s: member id %q: %w", m.Name, m.ID, err)
	}
	return srv.MoveLeader(ctx, id)
}
