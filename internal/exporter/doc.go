// Package exporter is the drive exporter of a node: a level-triggered,
// idempotent reconcile that makes the kernel's nvmet target export exactly
// the node's drives that are members of a volume, each to exactly the host
// that runs that volume's engine (the owner).
//
// # Desired state
//
// Desire is pure: from this node's claimed drives, the volumes and their
// owners' host NQNs and DH-HMAC-CHAP secrets, and the kernel's nvmet
// features, it computes an nvmet.Spec:
//
//   - every local drive that is a member of a volume owned by another node
//     is subsystem nqn.2026-11.io.fabraid:drive:<drive id> (NQN), namespace
//     1 = the drive, with a namespace UUID and NGUID derived from the drive
//     id (NamespaceUUID: stable across reboots, re-exports and owners);
//   - allowed hosts = exactly the owner's host NQN; allow_any_host is never
//     set (kernel/nvmet refuses it anyway);
//   - the owner's host entry carries its DH-HMAC-CHAP secret whenever the
//     kernel has nvmet authentication (dhchap_key in configfs); an owner
//     without a secret is then not exported to (a Problem) unless
//     Input.AllowNoAuth;
//   - a kernel without nvmet authentication exports nothing at all
//     (Desired.Refused, Refusal: require_auth) unless
//     Input.AllowUnauthenticated (require_auth = false), which exports by
//     host NQN alone; applying the refusal's empty spec removes the drive
//     exports there were;
//   - all exported drives are linked on one tcp port per storage address
//     (ids PortBase, PortBase+1, ... in kernel/nvmet's DriveOwnership
//     range, service id DefaultServiceID unless set);
//   - drives in no volume, in a volume this node owns (its engine opens
//     them directly), in a volume without an owner (failover in progress:
//     fenced from everyone), or claimed by two volumes (a Problem) are not
//     exported, and are unexported when they get there.
//
// # Apply and fencing
//
// Reconcile reads the target's actual state every time and converges it
// through the target backend (plugins/backend, scope NQNPrefix; the kernel
// backend maps it to kernel/nvmet's DriveOwnership: the volume manager's
// …:vol:* subsystems and ports are left alone). Desire and Fence reason on
// kernel/nvmet's Spec and State; plugins/nvmet FromSpec and StateOf convert
// to and from the backend's exports. Removing a host from allowed_hosts
// does not end the controllers it already has, so a changed owner (or a
// changed secret) would leave the old owner writing. Stale finds the drive
// subsystems whose hosts may hold controllers they must not keep (linked
// on a port, and not to be exported any more, or allowing a host or key
// the desired state does not). When there are any, Reconcile first applies
// the fence step: the desired state with them unlinked from every port,
// which makes the kernel tear down their controllers, and with nothing
// linked that was not linked already (so nothing becomes reachable before
// the teardown: after a daemon restart, configfs still holding exports
// for an old owner, these go first). Then it applies the desired state,
// which links the drives again for their owners only, and reads the state
// back: a Reconcile returns nil only when no export is Stale. A crash
// between the steps is finished by the next Reconcile. Result.Fenced names
// the drives fenced this time (for logs).
//
// # Owner and acknowledgement
//
// Volume.Owner is the node holding the volume's owner key (cluster/owner;
// plan.FencedExporterInput), not the record's desired owner, and
// Volume.Epoch its epoch; without a key the drives go to nobody. During a
// planned move the drives are exported to the move's target as well
// (Volume.Prepared, handover.go: it imports them ahead and writes nothing
// before it holds the key), and an old owner that ended its own
// controllers (Volume.Released) is dropped from the allowed hosts without
// the fence step. Every
// Reconcile that returns without error leaves no controller of a host
// other than each drive's Owner (and Prepared) on the drive ports (as long
// as nothing but the exporter changes the drive subsystems, and a Released
// host did end its own), so the caller may then
// acknowledge "fenced for Epoch" (cluster/fence.Ack) for every volume of
// the Input, also after a restart that found the fence already done. An
// error means no acknowledgement. A node that reboots has empty configfs
// and exports nothing until its daemon has read the owner keys from etcd.
//
// # What it does not do
//
// It does not talk to etcd, load modules or choose owners; the caller
// adapts the node registry to Input. Run one Reconcile at a time per node.
package exporter
