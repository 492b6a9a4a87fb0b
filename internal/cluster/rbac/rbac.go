// Package rbac sets up etcd's role-based access control for fabraid
// (issue 28): each node may write only what its role needs.
//
// # Who is who
//
// etcd's client port requires a client certificate signed by the
// cluster CA (package store). With authentication enabled, etcd takes the
// user name of a request from the common name of the client certificate
// that made the TLS connection (server/auth AuthInfoFromTLS; no password,
// no token). fabraid's node certificates carry CN = node name (package
// pki), one per node, so each node is the etcd user of its own name.
// The member certificate (CN pki.MemberCN) is used on the peer port only.
//
// # Roles
//
//   - etcd members: the user has etcd's root role. Members run the join
//     service (membership changes, join tokens, the users of joining
//     nodes), hold the CA key anyway, and are the ones that change etcd
//     membership (learner add, promote, remove).
//   - client-only nodes: role NodeRole (shared by every such node: read
//     everything under keys.Prefix, write the prefixes that whichever node
//     creates, owns or serves a volume writes) and their own role
//     OwnRole(node) (exactly their own keys: registry record, alive key,
//     host key, consumer paths).
//   - the user RootUser with the root role exists because etcd refuses to
//     enable authentication without it; it has no password and node names
//     may not be RootUser (CheckName), so no certificate names it.
//
// Table lists every write with its prefix and who may do it; docs/cluster.md
// "Security model" has it too.
//
// Leases: etcd lets a user revoke or keep alive a lease only when it may
// write every key attached to it, and attach a key to a lease only when it
// may write the lease's other keys. Every lease fabraid takes holds only
// keys its node may write (its alive key and fence acks; owner keys;
// volume status and its own paths), so that holds for both roles.
package rbac

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// Role and user names.
const (
	// RootUser and RootRole are etcd's: authentication cannot be enabled
	// without a user RootUser holding RootRole.
	RootUser = "root"
	RootRole = "root"
	// NodeRole is shared by every client-only node.
	NodeRole = "fabraid-node"
	// ownRolePrefix + node name is a client-only node's own role.
	ownRolePrefix = "fabraid-node:"
)

// OwnRole is the role of client-only node's own keys.
func OwnRole(node string) string { return ownRolePrefix + node }

// Perm is one permission: Key alone (End "") or the range [Key, End).
type Perm struct {
	Key, End string
	Type     clientv3.PermissionType
}

func prefix(p string, t clientv3.PermissionType) Perm {
	return Perm{Key: p, End: clientv3.GetPrefixRangeEnd(p), Type: t}
}

// shared are the prefixes every node that may create, own, serve or
// consume a volume writes (see Table for who writes what).
var shared = []string{
	keys.CntlIDBlocksPrefix,
	keys.VolumesPrefix,
	keys.VolumeNamesPrefix,
	keys.VolumeStatusPrefix,
	keys.DriveClaimsPrefix,
	keys.RequestsPrefix,
	keys.OwnersPrefix,
	keys.FencePrefix,
	keys.HostKeyAcksPrefix,
	keys.MovesPrefix,
	keys.DrainsPrefix,
	keys.DownPrefix,
}

// NodePerms are NodeRole's permissions: read all of fabraid's keys
// (watches and transaction comparisons need read), write the shared
// prefixes.
func NodePerms() []Perm {
	out := []Perm{prefix(keys.Prefix, clientv3.PermissionType(clientv3.PermRead))}
	for _, p := range shared {
		out = append(out, prefix(p, clientv3.PermissionType(clientv3.PermReadWrite)))
	}
	return out
}

// OwnPerms are OwnRole(node)'s permissions: write exactly node's own
// keys (single keys, not prefixes: the prefix of node "a" would cover
// node "ab").
func OwnPerms(node string) []Perm {
	var out []Perm
	for _, k := range []string{keys.Node(node), keys.Alive(node), keys.HostKey(node), keys.Paths(node), keys.OwnerSession(node)} {
		out = append(out, Perm{Key: k, Type: clientv3.PermissionType(clientv3.PermReadWrite)})
	}
	return out
}

// Write is one row of Table: a kind of etcd write fabraid does.
type Write struct {
	Key    string // the key or prefix, as in package keys
	Op     string // the etcd request
	By     string // the code that does it
	Member bool   // only members (root) may
	Client string // what a client-only node may do there
}

// Table lists every etcd write fabraid does and who may do it; it is
// the source of docs/cluster.md's table, and TestTable checks that the
// permissions above say the same.
var Table = []Write{
	{keys.Cluster, "Put (init); Txn put if absent (external etcd)", "cluster.Node.Init, startExternal", true, "no"},
	{keys.TokensPrefix + "<id>", "Grant, Txn put on lease; Txn put (redeem, release)", "token.Issue/Redeem/Release (join service)", true, "no"},
	{"etcd membership", "MemberAddAsLearner, MemberPromote, MemberRemove", "join service, joining member, leave, remove", true, "no"},
	{"etcd users and roles", "UserAdd, RoleAdd, grants, AuthEnable", "rbac (init, join service)", true, "no"},
	{keys.NodesPrefix + "<node>", "Txn put (register); Txn delete (leave, remove)", "registry.Register, registry.Delete", false, "its own key only; remove of another node: members"},
	{keys.AlivePrefix + "<node>", "Grant, Put on lease, KeepAlive, Revoke", "registry.StartHeartbeat", false, "its own key only"},
	{keys.HostKeysPrefix + "<node>", "Put; Delete (with the record)", "volumes.EnsureHostKey, registry.Delete", false, "its own key only"},
	{keys.PathsPrefix + "<node>", "Put on the status lease", "volumes.PutPaths (daemon)", false, "its own key only"},
	{keys.CntlIDBlocksPrefix + "<n>", "Txn put with the record; delete with it", "registry.Register, registry.Delete", false, "any block (claims a free one)"},
	{keys.VolumesPrefix + "<uuid>", "Txn put/delete", "volumes.Create/Update/Delete, StartMove, SubmitReplace", false, "any volume"},
	{keys.VolumeNamesPrefix + "<name>", "Txn put/delete with the record", "volumes.Create/Delete", false, "any"},
	{keys.DriveClaimsPrefix + "<node>/<drive>", "Txn put/delete with the record", "volumes.Create/Update/Delete", false, "any node's drives (the creator claims every member's)"},
	{keys.VolumeStatusPrefix + "<uuid>", "Put on the status lease; delete with the record", "volumes.PutStatus (owner)", false, "any volume"},
	{keys.RequestsPrefix + "<uuid>/<id>", "Txn put; Txn delete", "volumes.Submit/Claim/Finish/CleanupRequests", false, "any"},
	{keys.OwnersPrefix + "<uuid>", "Grant, Txn put on the owner lease, Txn delete, Revoke", "owner.Acquire/Resign, Session", false, "any volume"},
	{keys.OwnerSessionsPrefix + "<node>", "Put on the owner lease", "owner.Publish (the node's owner session)", false, "its own key only"},
	{keys.FencePrefix + "<uuid>/<node>", "Put on the node lease", "fence.Ack (drive exporter)", false, "any (the node is the last part of the key)"},
	{keys.HostKeyAcksPrefix + "<node>/<by>", "Txn put if different; Delete of the node's prefix", "volumes.AckHostKey (every node's target), volumes.DeleteHostKeyAcks (the rotating node)", false, "any (the acknowledging node is the last part of the key)"},
	{keys.MovesPrefix + "<uuid>", "Txn put; delete with the record", "volumes.StartMove/UpdateMove/Delete", false, "any"},
	{keys.DrainsPrefix + "<node>", "Txn put if absent; Delete (undrain, and with the record)", "registry.SetDrained (node drain on any node), registry.Delete", false, "any node's (node drain NODE is served by any node)"},
	{keys.DownPrefix + "<node>", "Txn put if absent while the alive key is; Txn delete while it exists; delete with the record", "registry.MarkDown/ClearDown (the owners' re-protection clock), registry.Delete", false, "any node's (any owner sees another node die)"},
}

// CheckName refuses node names that would be etcd's root user.
func CheckName(node string) error {
	if node == RootUser {
		return fmt.Errorf("node name %q is etcd's administrator user; choose another", node)
	}
	return nil
}

// Enabled says whether etcd's authentication is on.
func Enabled(ctx context.Context, cli *clientv3.Client) (bool, error) {
	r, err := cli.AuthStatus(ctx)
	if err != nil {
		return false, fmt.Errorf("rbac: auth status: %w", err)
	}
	return r.Enabled, nil
}

// Enable sets up the roles, the root user and the users of members and
// clients (AddMember, AddClient), then turns authentication on. cli must
// be allowed to (authentication off, or a root user's certificate). It
// is idempotent.
func Enable(ctx context.Context, cli *clientv3.Client, members, clients []string) error {
	if err := ensureUser(ctx, cli, RootUser); err != nil {
		return err
	}
	if err := grant(ctx, cli, RootUser, RootRole); err != nil {
		return err
	}
	for _, m := range members {
		if err := AddMember(ctx, cli, m); err != nil {
			return err
		}
	}
	for _, c := range clients {
		if err := AddClient(ctx, cli, c); err != nil {
			return err
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("rbac: enable authentication: %w", err)
	}
	return nil
}

// AddMember makes node's user an etcd administrator (root role) and takes
// its client roles away. A member may be named RootUser (it is the
// administrator anyway); the join service refuses that name (CheckName)
// because a joiner may become a client.
func AddMember(ctx context.Context, cli *clientv3.Client, node string) error {
	if err := ensureUser(ctx, cli, node); err != nil {
		return err
	}
	if err := grant(ctx, cli, node, RootRole); err != nil {
		return err
	}
	return revoke(ctx, cli, node, NodeRole, OwnRole(node))
}

// AddClient gives node's user the shared role and its own role (made
// here with OwnPerms) and takes the root role away (a name that was a
// member's before).
func AddClient(ctx context.Context, cli *clientv3.Client, node string) error {
	if err := CheckName(node); err != nil {
		return err
	}
	if err := ensureRole(ctx, cli, NodeRole, NodePerms()); err != nil {
		return err
	}
	if err := ensureRole(ctx, cli, OwnRole(node), OwnPerms(node)); err != nil {
		return err
	}
	if err := ensureUser(ctx, cli, node); err != nil {
		return err
	}
	for _, r := range []string{NodeRole, OwnRole(node)} {
		if err := grant(ctx, cli, node, r); err != nil {
			return err
		}
	}
	return revoke(ctx, cli, node, RootRole)
}

// RemoveNode deletes node's user and its own role: its certificate no
// longer reads or writes etcd once authentication is on.
func RemoveNode(ctx context.Context, cli *clientv3.Client, node string) error {
	if node == RootUser {
		return nil
	}
	if _, err := cli.UserDelete(ctx, node); err != nil && !is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("rbac: delete user %s: %w", node, err)
	}
	if _, err := cli.RoleDelete(ctx, OwnRole(node)); err != nil && !is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("rbac: delete role %s: %w", OwnRole(node), err)
	}
	return nil
}

func ensureUser(ctx context.Context, cli *clientv3.Client, name string) error {
	_, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true})
	if err != nil && !is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("rbac: add user %s: %w", name, err)
	}
	return nil
}

func roles(ctx context.Context, cli *clientv3.Client, user string) ([]string, error) {
	r, err := cli.UserGet(ctx, user)
	if err != nil {
		return nil, fmt.Errorf("rbac: user %s: %w", user, err)
	}
	return r.Roles, nil
}

func grant(ctx context.Context, cli *clientv3.Client, user, role string) error {
	have, err := roles(ctx, cli, user)
	if err != nil || slices.Contains(have, role) {
		return err
	}
	if _, err := cli.UserGrantRole(ctx, user, role); err != nil {
		return fmt.Errorf("rbac: grant %s to %s: %w", role, user, err)
	}
	return nil
}

func revoke(ctx context.Context, cli *clientv3.Client, user string, rs ...string) error {
	have, err := roles(ctx, cli, user)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if !slices.Contains(have, r) {
			continue
		}
		if _, err := cli.UserRevokeRole(ctx, user, r); err != nil && !is(err, rpctypes.ErrRoleNotGranted) {
			return fmt.Errorf("rbac: revoke %s from %s: %w", r, user, err)
		}
	}
	return nil
}

// ensureRole makes role hold at least perms (etcd merges a grant over a
// range it already has).
func ensureRole(ctx context.Context, cli *clientv3.Client, role string, perms []Perm) error {
	var have []*authpb.Permission
	r, err := cli.RoleGet(ctx, role)
	switch {
	case err == nil:
		have = r.Perm
	case is(err, rpctypes.ErrRoleNotFound):
		if _, err := cli.RoleAdd(ctx, role); err != nil && !is(err, rpctypes.ErrRoleAlreadyExist) {
			return fmt.Errorf("rbac: add role %s: %w", role, err)
		}
	default:
		return fmt.Errorf("rbac: role %s: %w", role, err)
	}
	for _, p := range perms {
		if slices.ContainsFunc(have, func(h *authpb.Permission) bool {
			return string(h.Key) == p.Key && string(h.RangeEnd) == p.End && h.PermType == authpb.Permission_Type(p.Type)
		}) {
			continue
		}
		if _, err := cli.RoleGrantPermission(ctx, role, p.Key, p.End, p.Type); err != nil {
			return fmt.Errorf("rbac: grant %s to role %s: %w", p.Key, role, err)
		}
	}
	return nil
}

// is matches an etcd error however the client wrapped it.
func is(err, target error) bool {
	return errors.Is(err, target) || errors.Is(rpctypes.Error(err), target)
}
