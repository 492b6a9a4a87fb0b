package model

import (
	"encoding/json"
	"slices"
	"time"
)

// Schema versions of the volume records; readers refuse newer ones.
const (
	VolumeVersion       = 1
	VolumeNameVersion   = 1
	VolumeStatusVersion = 1
	HostKeyVersion      = 1
)

// Volume states (Volume.State): the desired-state life cycle of a volume
// record. The data state (optimal, degraded, ...) is VolumeStatus.State.
const (
	// VolumeCreating: placed and written by the creating node; the owner
	// has not formatted the members yet. Members carry no UUID.
	VolumeCreating = "creating"
	// VolumeReady: formatted; every member carries its member UUID.
	VolumeReady = "ready"
	// VolumeDeleting: delete asked; the owner stops the engine, wipes the
	// members and deletes the record.
	VolumeDeleting = "deleting"
)

// Volume is a volume's desired state, the record at keys.Volume(UUID).
// Everything about a volume is keyed by its UUID; Name is unique in the
// cluster (keys.VolumeName holds the name's claim).
type Volume struct {
	Version   int    `json:"version"`
	UUID      string `json:"uuid"` // canonical 8-4-4-4-12, lower case
	Name      string `json:"name"`
	K         int    `json:"k"`
	M         int    `json:"m"`
	Groups    int    `json:"groups"`
	ChunkSize int    `json:"chunk_size,omitempty"` // bytes; 0: the engine's default
	// JournalBytes is the stripe journal area the owner creates on every
	// member (engine.Config.JournalBytes); 0: the engine's default.
	JournalBytes int64 `json:"journal_bytes,omitempty"`
	// FixedParity is the owner-parity layout (engine.Config.FixedParity):
	// parity on every group's last M slots, where placement puts the
	// members on the owner's node, so that the owner journals nothing
	// while it runs the volume. false: parity rotates (records before it).
	FixedParity bool `json:"fixed_parity,omitempty"`
	// Owner is the node that runs the volume's engine; "" means no owner
	// (a failover in progress: the members are exported to nobody).
	Owner string `json:"owner"`
	State string `json:"state"` // VolumeCreating, VolumeReady, VolumeDeleting
	// MemberSize is the bytes of every member the engine uses (the
	// smallest placed drive).
	MemberSize int64          `json:"member_size"`
	Members    []VolumeMember `json:"members"` // slot order
	Created    time.Time      `json:"created"`
	// Attach is the nodes that consume the volume (connect to its NVMe
	// head and get access to its export); nil means every node, as for
	// records written before attach lists.
	Attach *AttachList `json:"attach,omitempty"`
}

// AttachList names the nodes a volume is attached to; an empty list
// attaches it to no node.
type AttachList struct {
	Nodes []string `json:"nodes"`
}

// AttachedTo reports whether node consumes v: every node when v has no
// attach list.
func (v Volume) AttachedTo(node string) bool {
	return v.Attach == nil || slices.Contains(v.Attach.Nodes, node)
}

// VolumeMember is one member slot of a Volume.
type VolumeMember struct {
	Slot   int    `json:"slot"`
	Node   string `json:"node"`   // the node holding the drive
	Domain string `json:"domain"` // its failure domain
	Drive  string `json:"drive"`  // claim id of the drive on Node
	// UUID is the member UUID written in the superblock (canonical
	// form); set by the owner once the members are formatted. Before
	// that the owner finds the drive by its export NQN or claim id.
	UUID string `json:"uuid,omitempty"`
}

// VolumeName is the value at keys.VolumeName(name) and at
// keys.DriveClaim(node, drive): which volume holds the name or the drive.
type VolumeName struct {
	Version int    `json:"version"`
	UUID    string `json:"uuid"`
}

// VolumeStatus is what the owner reports about a running volume, at
// keys.VolumeStatus(UUID) on the owner's lease (it disappears when the
// owner dies).
type VolumeStatus struct {
	Version int    `json:"version"`
	UUID    string `json:"uuid"`
	Name    string `json:"name"`
	Owner   string `json:"owner"`
	// State is the volume manager's word: "optimal", "degraded",
	// "rebuilding", "failed", "stopped", or "creating" while the owner
	// formats the members.
	State   string               `json:"state"`
	Members []VolumeMemberStatus `json:"members"`
	// Task and Progress: the running rebuild, resync or scrub ("" and 0
	// when none); Progress is a percentage.
	Task     string  `json:"task,omitempty"`
	Progress float64 `json:"progress,omitempty"`
	// ResyncBytes is the bytes the last or current partial resync (a
	// returning member, from the write-intent bitmap) copied.
	ResyncBytes int64  `json:"resync_bytes"`
	Error       string `json:"error,omitempty"`
	// LastTask is the owner's api.TaskResult of the last finished
	// rebuild or scrub, as JSON (what --wait on another node waits for).
	LastTask json.RawMessage `json:"last_task,omitempty"`
	// Epoch is the owner epoch the owner's engine runs at, and Exported
	// says the owner's export of it is applied (0 and false while it
	// runs no engine): what an old owner handing the volume over waits
	// for (docs/cluster.md, "Planned move").
	Epoch    uint64 `json:"epoch,omitempty"`
	Exported bool   `json:"exported,omitempty"`
	// ChunkSize, Journal, JournalBytes and OwnerJournal are the engine's
	// (api.Volume): what the other nodes show of the volume.
	ChunkSize    int   `json:"chunk_size,omitempty"`
	Journal      bool  `json:"journal,omitempty"`
	JournalBytes int64 `json:"journal_bytes,omitempty"`
	OwnerJournal int   `json:"owner_journal,omitempty"`
	// Reprotect says what re-protection of members on down nodes waits
	// for, or why it cannot run (plan.Reprotect); "" when no member's
	// node is down.
	Reprotect string    `json:"reprotect,omitempty"`
	Updated   time.Time `json:"updated"`
}

// VolumeMemberStatus is one member slot as the owner sees it.
type VolumeMemberStatus struct {
	Slot int    `json:"slot"`
	Node string `json:"node"`
	// Role is the superblock role in lower case: "active", "failed",
	// "rebuilding", "spare", ...
	Role string `json:"role"`
	// Failure says why a failed member failed ("admin", "io-error",
	// "missing", "unreachable", ...); empty when it has not failed.
	Failure string `json:"failure,omitempty"`
}

// Degraded lists the slots of s whose role is not "active".
func (s VolumeStatus) Degraded() []VolumeMemberStatus {
	var out []VolumeMemberStatus
	for _, m := range s.Members {
		if m.Role != "active" {
			out = append(out, m)
		}
	}
	return out
}

// HostKey is the value at keys.HostKey(node): the node's DH-HMAC-CHAP
// secret, which every exporter allowing that host uses (drive exports
// and volume exports alike).
type HostKey struct {
	Version int `json:"version"`
	// Secret is the DHHC-1 form (kernel/nvmf Secret.Reveal). Never log
	// it; wrap it in nvmf.Secret (ParseSecret) to print it.
	Secret string `json:"secret"`
	// CtrlSecret is the node's DH-HMAC-CHAP controller secret (DHHC-1
	// form; empty from nodes made before bidirectional authentication):
	// its nvmet presents it to every host it exports to, drive and volume
	// exports alike, and the hosts that connect to it check it
	// (dhchap_ctrl_secret). Never log it either.
	CtrlSecret string `json:"ctrl_secret,omitempty"`
	// PendingSecret is the node's next host secret (DHHC-1 form), announced
	// by a host key rotation (fabraid cluster rotate-keys --host) while
	// Secret stays the one the node presents: every target puts it on the
	// node's host entry in place and acknowledges (keys.HostKeyAck), then
	// the node switches to it and it becomes Secret. Never log it.
	PendingSecret string `json:"pending_secret,omitempty"`
}

// VolumeInfo is one volume in "fabraid cluster status": the record and
// the owner's status.
type VolumeInfo struct {
	UUID   string `json:"uuid"`
	Name   string `json:"name"`
	K      int    `json:"k"`
	M      int    `json:"m"`
	Groups int    `json:"groups"`
	Owner  string `json:"owner"`
	// Record is Volume.State; State is VolumeStatus.State, "unknown"
	// when the owner publishes none (owner dead, or not running it yet).
	Record string `json:"record"`
	State  string `json:"state"`
	// Degraded are the members that are not active (from the status).
	Degraded []VolumeMemberStatus `json:"degraded,omitempty"`
	Task     string               `json:"task,omitempty"`
	Progress float64              `json:"progress,omitempty"`
	// ResyncBytes: see VolumeStatus.
	ResyncBytes int64 `json:"resync_bytes,omitempty"`
}
