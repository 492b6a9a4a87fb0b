// Package keys names every key fabraid keeps in etcd. All live under one
// prefix, /fabraid/v1/; the "v1" is the key layout's version (a layout
// change gets a new prefix and a migration), and every value is a JSON
// object with a "version" field for its own schema.
//
//	/fabraid/v1/cluster              Cluster: name, CA fingerprint, etcd member target, created
//	/fabraid/v1/nodes/<node>         registry.Node: domain, host NQN, addresses, drives (durable)
//	/fabraid/v1/cntlid-blocks/<n>    model.CntlIDClaim: the node holding controller-ID block n (claimed with its record)
//	/fabraid/v1/alive/<node>         registry.Alive: attached to the node's lease; gone = dead
//	/fabraid/v1/down/<node>          model.Down: since when the node has been seen dead (the down-out clock)
//	/fabraid/v1/tokens/<id>          token.Record: SHA-256 of the secret, expiry, use (leased)
//	/fabraid/v1/volumes/<uuid>       model.Volume: a volume's desired state (durable)
//	/fabraid/v1/volume-names/<name>  model.VolumeName: the name's claim, written with the volume
//	/fabraid/v1/volume-status/<uuid> model.VolumeStatus: the owner's report, on the owner's lease
//	/fabraid/v1/hostkeys/<node>      model.HostKey: the node's DH-HMAC-CHAP secret (durable)
//	/fabraid/v1/hostkey-acks/<node>/<by>  model.HostKeyAck: node by's target has node's pending host key (durable, deleted with the rotation)
//	/fabraid/v1/drive-claims/<node>/<drive>  model.VolumeName: the volume a drive is a member of
//	/fabraid/v1/owners/<uuid>        owner.Record: the volume's owner, on its owner lease; create revision = epoch
//	/fabraid/v1/requests/<uuid>/<id> model.Request: an engine operation for the owner to carry out, and its result
//	/fabraid/v1/fence/<uuid>/<node>  fence.Record: node's drive exports of the volume allow only the holder of an epoch (on node's lease)
//	/fabraid/v1/moves/<uuid>         model.Move: a planned move of the volume and its phase (durable)
//	/fabraid/v1/paths/<node>         model.NodePaths: the node's consumer controllers of every volume (on its status lease)
//
// Node names are checked by the configuration (letters, digits, '.', '_',
// '-'), so they never contain '/'; volume names are checked the same way
// before they become keys (package volumes), and UUIDs are canonical.
package keys

import (
	"net/url"
	"strconv"
)

// Prefix is the root of every fabraid key.
const Prefix = "/fabraid/v1/"

// Cluster is the key of the cluster record.
const Cluster = Prefix + "cluster"

// NodesPrefix and AlivePrefix are the prefixes of the node registry.
const (
	NodesPrefix  = Prefix + "nodes/"
	AlivePrefix  = Prefix + "alive/"
	TokensPrefix = Prefix + "tokens/"
	// CntlIDBlocksPrefix holds the claims of the controller-ID blocks.
	CntlIDBlocksPrefix = Prefix + "cntlid-blocks/"
	// DrainsPrefix holds the drained nodes (fabraid node drain): one key
	// per node, written by the node that served the command.
	DrainsPrefix = Prefix + "drains/"
	// DownPrefix holds, for each node seen dead, since when (the clock
	// of re-protection's down_out_interval): written only while the
	// node's alive key is absent, deleted only while it is present.
	DownPrefix = Prefix + "down/"
)

// The volume prefixes and the host key prefix.
const (
	VolumesPrefix      = Prefix + "volumes/"
	VolumeNamesPrefix  = Prefix + "volume-names/"
	VolumeStatusPrefix = Prefix + "volume-status/"
	HostKeysPrefix     = Prefix + "hostkeys/"
	HostKeyAcksPrefix  = Prefix + "hostkey-acks/"
	OwnersPrefix       = Prefix + "owners/"
	DriveClaimsPrefix  = Prefix + "drive-claims/"
	RequestsPrefix     = Prefix + "requests/"
	FencePrefix        = Prefix + "fence/"
	MovesPrefix        = Prefix + "moves/"
	PathsPrefix        = Prefix + "paths/"
)

// Node is a node's registry record.
func Node(name string) string { return NodesPrefix + name }

// CntlIDBlock is the claim of controller-ID block b (decimal, b >= 1).
func CntlIDBlock(b int) string { return CntlIDBlocksPrefix + strconv.Itoa(b) }

// Alive is a node's liveness key.
func Alive(name string) string { return AlivePrefix + name }

// Drain is the key that marks node name drained.
func Drain(name string) string { return DrainsPrefix + name }

// Down is the key that says since when node name has been seen dead.
func Down(name string) string { return DownPrefix + name }

// Token is a join token's record.
func Token(id string) string { return TokensPrefix + id }

// Volume is a volume's record, by volume UUID.
func Volume(uuid string) string { return VolumesPrefix + uuid }

// VolumeName is the claim of a volume name.
func VolumeName(name string) string { return VolumeNamesPrefix + name }

// VolumeStatus is the owner's status of a volume, by volume UUID.
func VolumeStatus(uuid string) string { return VolumeStatusPrefix + uuid }

// HostKey is a node's DH-HMAC-CHAP secret.
func HostKey(node string) string { return HostKeysPrefix + node }

// HostKeyAcks is the prefix of the acknowledgements of node's pending
// host key.
func HostKeyAcks(node string) string { return HostKeyAcksPrefix + node + "/" }

// HostKeyAck is node by's acknowledgement of node's pending host key.
func HostKeyAck(node, by string) string { return HostKeyAcks(node) + by }

// Owner is the ownership key of a volume, by volume UUID (package
// cluster/owner): its create revision is the volume's owner epoch.
func Owner(uuid string) string { return OwnersPrefix + uuid }

// OwnerSessionsPrefix holds each node's current owner session (package
// cluster/owner).
const OwnerSessionsPrefix = Prefix + "owner-sessions/"

// OwnerSession is node's owner session key: the session's lease id, on
// that lease, so that it vanishes when the session's lease ends.
func OwnerSession(node string) string { return OwnerSessionsPrefix + node }

// DriveClaim is the claim of drive (a claim id, path-escaped because ids
// come from drive serials) of node by a volume.
func DriveClaim(node, drive string) string {
	return DriveClaimsPrefix + node + "/" + url.PathEscape(drive)
}

// Request is engine operation request id of volume uuid (package volumes,
// requests.go); ids are hex, so the key needs no escaping.
func Request(uuid, id string) string { return RequestsPrefix + uuid + "/" + id }

// FenceVolume is the prefix of a volume's fence acknowledgements, by
// volume UUID (package cluster/fence).
func FenceVolume(uuid string) string { return FencePrefix + uuid + "/" }

// Fence is node's fence acknowledgement of a volume, by volume UUID.
func Fence(uuid, node string) string { return FenceVolume(uuid) + node }

// Move is the planned move of a volume, by volume UUID.
func Move(uuid string) string { return MovesPrefix + uuid }

// Paths are node's consumer controllers of the volume exports.
func Paths(node string) string { return PathsPrefix + node }
