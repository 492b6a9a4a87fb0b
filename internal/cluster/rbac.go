package cluster

import (
	"context"
	"fmt"

	"github.com/fabraid/fabraid/internal/cluster/rbac"
	"github.com/fabraid/fabraid/internal/cluster/registry"
)

// EnableRBAC turns on least privilege in etcd (package rbac) for a
// cluster made before it: every etcd member's user gets etcd's root role,
// every other registered node the client roles, and etcd's
// authentication goes on. Clusters made by this version have it from
// init. Run it on an etcd member once every node runs a version whose
// join service makes the users of joining nodes (a node joined through
// an older member would have no etcd user: run EnableRBAC again, it is
// idempotent). External etcd is left to its operator (ErrExternal).
func (n *Node) EnableRBAC(ctx context.Context) error {
	n.mu.Lock()
	cli, st := n.cli, n.st
	n.mu.Unlock()
	if len(n.o.External) > 0 {
		return ErrExternal
	}
	if cli == nil || st == nil {
		return ErrNotInCluster
	}
	if !st.Member {
		return fmt.Errorf("cluster: etcd authentication is enabled from an etcd member: %w", ErrNotMember)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("cluster: member list: %w", err)
	}
	member := map[string]bool{}
	var members, clients []string
	for _, m := range ml.Members {
		if m.Name != "" {
			member[m.Name] = true
			members = append(members, m.Name)
		}
	}
	nodes, err := registry.List(ctx, cli)
	if err != nil {
		return err
	}
	for _, ns := range nodes {
		if !member[ns.Name] {
			clients = append(clients, ns.Name)
		}
	}
	if !member[n.o.Name] {
		members = append(members, n.o.Name)
	}
	if err := rbac.Enable(ctx, cli, members, clients); err != nil {
		return err
	}
	n.o.Log.Info("cluster: etcd authentication enabled", "members", members, "clients", clients)
	return nil
}
