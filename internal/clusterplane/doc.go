// Package clusterplane is the cluster data plane of one fabraidd node: its
// one job is to converge this node's drives, engines, exports and consumer
// devices to the volumes recorded in etcd, and to answer the volume API
// from etcd in a cluster.
//
// A Plane works over the node's volume manager (*volmgr.Manager) and its
// cluster membership (*cluster.Node). It owns:
//
//   - the volume API in a cluster: create, list, show, delete (vol.go),
//     engine operations and their requests in etcd (req.go), planned moves
//     (move.go), node drains (drain.go), controller key rotation (auth.go);
//   - the reconcile loop (loop.go, sync.go): read the view from etcd, decide
//     ownership (owner.go: the facts for the pure ownership.Decide and the
//     executor of its actions), fence old owners in the drive exporter
//     (fence.go), import members, run the volume manager's cluster
//     reconcile, hand volumes over (move.go), re-protect members of down
//     nodes (reprotect.go), balance the etcd leadership (leader.go) and
//     publish statuses and consumer paths.
//
// Invariants: a node runs a volume only while it holds the volume's owner
// key, at the key's create revision as epoch; every mutation of desired
// state goes through etcd; the plane never imports internal/daemon (the
// daemon routes its API to a Plane or to the one-node volume manager).
// The design and etcd keys are in docs/cluster.md.
package clusterplane
