// Package model holds the cluster's record and status types: what etcd
// stores under the keys of package keys and what "fabraid cluster status"
// shows. It has no dependency on etcd, so the CLI decodes them without
// linking it. Records carry a "version" field for their schema.
package model

import "time"

// Drive is a claimed drive of a node.
type Drive struct {
	ID     string `json:"id"` // stable claim ID (internal/drive)
	Serial string `json:"serial,omitempty"`
	Model  string `json:"model,omitempty"`
	Size   int64  `json:"size"`
	// Spare: kept for replacements; no new volume's member (drive claim
	// --spare, drive spare).
	Spare bool `json:"spare,omitempty"`
}

// Node is a node's durable record.
type Node struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	// Domain is the failure domain of the node's drives (the node name
	// unless configured).
	Domain  string `json:"domain"`
	HostNQN string `json:"hostnqn"`
	// ClusterAddress is where the node's etcd member and join service
	// listen; StorageAddresses carry NVMe/TCP (from storage_cidrs and
	// storage_interfaces).
	ClusterAddress   string   `json:"cluster_address"`
	StorageAddresses []string `json:"storage_addresses"`
	Drives           []Drive  `json:"drives"`
	// EtcdMember is the node's etcd member ID (hex) when it runs one.
	EtcdMember string `json:"etcd_member,omitempty"`
	// CntlIDBlock is the node's controller-ID block for its volume
	// exports (volmgr.CntlIDRange), 1 and up: claimed at the node's
	// first registration in the same etcd transaction as the record (a
	// key at keys.CntlIDBlock), and never changed while the record
	// exists. 0 only in a record an older fabraid wrote, until the
	// node's next registration claims one.
	CntlIDBlock int `json:"cntlid_block,omitempty"`
	// Exports is whether the node exports its drives and volumes and how
	// their hosts authenticate: ExportsDHCHAP, ExportsHostNQN
	// (require_auth = false on a target without DH-HMAC-CHAP) or
	// ExportsRefused (require_auth and no DH-HMAC-CHAP: nothing exported,
	// ExportsWhy says why and how to fix it). "" before the node's daemon
	// first asked its target, or written by an older fabraid.
	Exports    string `json:"exports,omitempty"`
	ExportsWhy string `json:"exports_why,omitempty"`
	// NVMeTLS is what the node's drive ports offer (nvme_tls,
	// internal/fabrictls): "required" (TLS 1.3 only), "optional" (TLS or
	// plain) or "" (plain, also before the node's daemon decided or from
	// an older fabraid). Hosts of its drives connect with TLS or not by it.
	NVMeTLS string `json:"nvme_tls,omitempty"`
	// Joined is when the record was first written; Updated, its last
	// write. Neither orders anything.
	Joined  time.Time `json:"joined"`
	Updated time.Time `json:"updated"`
}

// Values of Node.Exports.
const (
	ExportsDHCHAP  = "dh-hmac-chap"  // each allowed host presents its secret
	ExportsHostNQN = "host-nqn-only" // allowed by host NQN alone (require_auth = false)
	ExportsRefused = "refused"       // exports nothing (require_auth, no DH-HMAC-CHAP)
)

// CannotExport says whether the node exports nothing (ExportsRefused):
// its drives cannot serve another owner and it cannot serve a volume, so
// placement and takeovers leave it out.
func (n Node) CannotExport() bool { return n.Exports == ExportsRefused }

// CntlIDClaim is the value of a controller-ID block's claim: the node
// whose record holds the block.
type CntlIDClaim struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
}

// Alive is the value of a node's liveness key.
type Alive struct {
	Version int       `json:"version"`
	Since   time.Time `json:"since"`
	PID     int       `json:"pid"`
	Lease   string    `json:"lease"` // hex lease ID
}

// Drain is the value of a drained node's key (keys.Drain): the node owns
// no volume while it is there (fabraid node drain).
type Drain struct {
	Version int       `json:"version"`
	Since   time.Time `json:"since"`
}

// Down says since when a node has been seen dead, and by whom: the
// cluster's clock for re-protection (docs/cluster.md, "Re-protection").
type Down struct {
	Version int       `json:"version"`
	Since   time.Time `json:"since"`
	SeenBy  string    `json:"seen_by"`
}

// NodeStatus is a node with its liveness and drain.
type NodeStatus struct {
	Node
	Alive      bool      `json:"alive"`
	AliveSince time.Time `json:"alive_since,omitzero"`
	// Drained: an administrator drained the node (fabraid node drain):
	// it is chosen as no volume's owner (placement, takeover, move
	// target) and hands the volumes it owns over to other nodes. Its
	// drives still serve as members.
	Drained      bool      `json:"drained,omitempty"`
	DrainedSince time.Time `json:"drained_since,omitzero"`
	// DownSince is when a node first saw this node dead, as recorded
	// in etcd (registry.MarkDown); zero when no record is there. A
	// record can outlive the node's return by a reconcile until one
	// node clears it (registry.ClearDown): read it with Alive.
	DownSince time.Time `json:"down_since,omitzero"`
}

// MayOwn says whether the node may be chosen as a volume's owner: alive,
// exporting and not drained.
func (n NodeStatus) MayOwn() bool { return n.Alive && !n.CannotExport() && !n.Drained }

// MemberStatus is one etcd member as seen by Members.
type MemberStatus struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	PeerURLs  []string `json:"peer_urls"`
	ClientURL []string `json:"client_urls"`
	Learner   bool     `json:"learner,omitempty"`
	Leader    bool     `json:"leader,omitempty"`
	Healthy   bool     `json:"healthy"`
	Error     string   `json:"error,omitempty"`
	RaftIndex uint64   `json:"raft_index,omitempty"`
}

// Status is the cluster as one node sees it.
type Status struct {
	Version       int            `json:"version"`
	Cluster       string         `json:"cluster"`
	CAFingerprint string         `json:"ca_sha256,omitempty"`
	Etcd          string         `json:"etcd"` // "embedded" or "external"
	Node          string         `json:"node"` // the node that answered
	Members       []MemberStatus `json:"members"`
	Leader        string         `json:"leader,omitempty"`
	// Healthy: a leader is known and every voting member answers.
	Healthy bool `json:"healthy"`
	// Problem says why part of the status could not be read (no etcd
	// leader: the registry and volumes need a quorum).
	Problem string       `json:"problem,omitempty"`
	Nodes   []NodeStatus `json:"nodes"`
	// Volumes are every volume record with its owner's status, by name.
	Volumes []VolumeInfo `json:"volumes"`
}

// MaxTokenTTL is the longest a join token may stay valid: a token is a
// password that makes a node, so "fabraid cluster token --ttl" and the
// daemon (package token's Issue) refuse more.
const MaxTokenTTL = 24 * time.Hour
