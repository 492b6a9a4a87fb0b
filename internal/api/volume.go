package api

import (
	"strings"
	"time"

	"github.com/fabraid/fabraid/engine"
)

// CreateRequest is the body of POST /v1/volumes: a new volume.
type CreateRequest struct {
	Name      string   `json:"name"`
	K         int      `json:"k"`
	M         int      `json:"m"`
	ChunkSize int      `json:"chunk_size,omitempty"` // default engine.DefaultChunkSize
	Drives    []string `json:"drives,omitempty"`     // claimed, unused drives; default: the first K+M such
	// JournalBytes is the stripe journal area on every member
	// (engine.Config.JournalBytes); 0: the default share of a member.
	JournalBytes int64 `json:"journal_bytes,omitempty"`
	// In a cluster: Groups of K+M members (default 1) placed on Nodes
	// (default: any alive node); Drives is not used there.
	Groups int      `json:"groups,omitempty"`
	Nodes  []string `json:"nodes,omitempty"`
	// Attach (in a cluster) lists the nodes that consume the volume; nil:
	// every node.
	Attach *Attach `json:"attach,omitempty"`
}

// Attach names the nodes a cluster volume is attached to: they connect
// to its NVMe head and its exports admit only their hosts. Empty: none.
type Attach struct {
	Nodes []string `json:"nodes"`
}

// String says which nodes: "every node" for nil, "no node", or the list.
func (a *Attach) String() string {
	switch {
	case a == nil:
		return "every node"
	case len(a.Nodes) == 0:
		return "no node"
	}
	return strings.Join(a.Nodes, ", ")
}

// AttachRequest sets a cluster volume's attach list: every node (All,
// as a volume without a list), or exactly Nodes (empty: no node).
type AttachRequest struct {
	All   bool     `json:"all,omitempty"`
	Nodes []string `json:"nodes"`
}

// Volume describes a volume: the reply of GET /v1/volumes/{ref}, one
// element of GET /v1/volumes. The volume manager (internal/volmgr) fills
// it in.
type Volume struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
	// State is optimal, degraded, rebuilding, failed, stopped, or waiting
	// (members missing at boot: internal/volmgr/gate.go; Error says why).
	State     string `json:"state"`
	Size      int64  `json:"size"`
	K         int    `json:"k"`
	M         int    `json:"m"`
	Groups    int    `json:"groups"`
	ChunkSize int    `json:"chunk_size"`
	Device    string `json:"device,omitempty"` // consumer device: NVMe multipath head
	// Attached lists the nodes a cluster volume is attached to; nil:
	// every node.
	Attached *Attach `json:"attached,omitempty"`
	// Owner is the node running the engine (in a cluster), and Epoch the
	// owner epoch its engine runs at (0: not known here).
	Owner     string      `json:"owner,omitempty"`
	Epoch     uint64      `json:"epoch,omitempty"`
	NQN       string      `json:"nqn"`
	Ublk      string      `json:"ublk,omitempty"`
	EnginePID int         `json:"engine_pid,omitempty"`
	Members   []Member    `json:"members,omitempty"`
	Failed    int         `json:"failed_members"`
	Stale     int         `json:"stale_members"`
	Progress  *Progress   `json:"progress,omitempty"`
	Task      string      `json:"task,omitempty"`
	LastTask  *TaskResult `json:"last_task,omitempty"`
	Error     string      `json:"error,omitempty"`
	// Reprotect (in a cluster) says what re-protection of members on
	// down nodes waits for, or why it cannot run.
	Reprotect string `json:"reprotect,omitempty"`
	// IO are the engine's request counters since it started (reset when
	// the engine process restarts).
	IO *engine.IOStats `json:"io,omitempty"`
	// Journal says whether the stripe journal protects writes while the
	// volume is degraded (on-disk format version 2).
	Journal bool `json:"journal"`
	// JournalBytes is the journal area on every member (engine
	// Status.JournalBytes); 0: no journal or not known here.
	JournalBytes int64 `json:"journal_bytes,omitempty"`
	// FixedParity: the owner-parity layout (parity on every group's last
	// M members; engine Geometry.FixedParity); false: parity rotates.
	FixedParity bool `json:"fixed_parity,omitempty"`
	// WriteHoleStripes counts stripes whose lost chunks may read back
	// wrong after the last unclean stop (a member lost at the crash
	// itself; docs/engine.md, "write hole"). 0 is the normal case.
	WriteHoleStripes int64 `json:"write_hole_stripes,omitempty"`
	// OwnerJournal counts the members covered by owner-domain journaling
	// (engine Status.OwnerJournal): writes to their data chunks survive
	// the owner's loss with them. 0: off.
	OwnerJournal int `json:"owner_journal,omitempty"`
	// UblkZeroCopy: this node's engine serves healthy reads zero copy
	// (config ublk_zero_copy = auto on a kernel with AUTO_BUF_REG).
	UblkZeroCopy bool `json:"ublk_zero_copy,omitempty"`
	// Rebuild is how much the running or last rebuild (or resync of
	// returning members) rewrites.
	Rebuild *RebuildBytes `json:"rebuild_bytes,omitempty"`
	// ExportAuth is how this node's exports authenticate their hosts (in
	// a cluster, on the owner): ExportAuthDHCHAP, or ExportAuthHostNQN
	// when the target lacks DH-HMAC-CHAP and any host presenting an
	// allowed host NQN gets in.
	ExportAuth string `json:"export_auth,omitempty"`
	// ExportRefused names the volume's nodes (owner or members) that
	// export nothing (require_auth and no DH-HMAC-CHAP in their target),
	// each as "node: reason": their members are unreachable for any other
	// owner and they cannot own the volume.
	ExportRefused []string `json:"export_refused,omitempty"`
	// PathRefused is why this node makes no new connection to the
	// volume (an NVMe/TCP TLS refusal under nvme_tls, cluster mode); ""
	// when it connects.
	PathRefused string `json:"path_refused,omitempty"`
}

// Values of Volume.ExportAuth (cluster mode only).
const (
	ExportAuthDHCHAP  = "dh-hmac-chap"  // each allowed host must present its secret
	ExportAuthHostNQN = "host-nqn-only" // the target lacks DH-HMAC-CHAP: allowed by host NQN alone
	ExportAuthRefused = "refused"       // the target lacks DH-HMAC-CHAP and require_auth: nothing exported
)

// Member is one member slot of a Volume.
type Member struct {
	Slot       int    `json:"slot"`
	Device     string `json:"device"`
	Domain     string `json:"domain"`
	Role       string `json:"role"`
	Resync     bool   `json:"resync,omitempty"`
	Checkpoint int64  `json:"checkpoint,omitempty"`
	// Failure says why a failed member failed: "admin", "io-error",
	// "missing", "unreachable" or "unrecorded". A "missing" or
	// "unreachable" member comes back by itself when its drive is found
	// again; the others stay failed until re-added or replaced.
	Failure string `json:"failure,omitempty"`
}

// Progress is a running rebuild, resync or scrub.
type Progress struct {
	Kind    string  `json:"kind"`
	Done    int64   `json:"done_rows"`
	Total   int64   `json:"total_rows"`
	Percent float64 `json:"percent"`
}

// TaskResult is the outcome of the last finished background task (rebuild
// or scrub) of a volume's engine.
type TaskResult struct {
	Kind     string              `json:"kind"`
	Error    string              `json:"error,omitempty"`
	Scrub    *engine.ScrubReport `json:"scrub,omitempty"`
	Finished time.Time           `json:"finished"`
	Seconds  float64             `json:"seconds"`
}

// RebuildBytes is how much of its targets the running (Running) or the
// last rebuild since the engine started rewrites: a resync of returning
// members (Partial: only the regions dirty in the write-intent bitmap, a
// node that came back) or a full rebuild (a replacement, a member that
// failed on an I/O error). Sizes are per-member data bytes summed over
// the targets (engine.Progress).
type RebuildBytes struct {
	Running bool `json:"running"`
	Partial bool `json:"partial"`
	// Regions counts the bitmap regions the resync had to cover.
	Regions int64 `json:"regions"`
	// CoverBytes is what it had to write when it started, Bytes what it
	// wrote so far, MemberBytes the data area of one member.
	CoverBytes  int64 `json:"cover_bytes"`
	Bytes       int64 `json:"bytes"`
	MemberBytes int64 `json:"member_bytes"`
}
