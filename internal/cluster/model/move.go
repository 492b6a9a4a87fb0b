package model

import "time"

// Schema versions of the move record and the consumer paths.
const (
	MoveVersion  = 1
	PathsVersion = 1
)

// Move phases (docs/cluster.md, "Planned move").
const (
	MoveRequested = "requested" // the record's owner is To; From drains
	MoveResigned  = "resigned"  // From froze its engine and resigned the owner key
	MoveDone      = "done"      // To serves; From removed its export
	MoveFailed    = "failed"    // the move ended otherwise (Error says how)
)

// Move is a planned move of a volume from its owner to another node, the
// value at keys.Move(Volume). It is written with the record's owner
// change in one transaction; the old owner moves it on.
type Move struct {
	Version int    `json:"version"`
	Volume  string `json:"volume"` // volume UUID
	From    string `json:"from"`   // owner when the move was asked
	To      string `json:"to"`     // target node
	// Epoch is From's owner epoch when the move was asked.
	Epoch uint64 `json:"epoch"`
	Phase string `json:"phase"`
	// Prepared: To has imported every member on a live node while From
	// still served (written by To in phase requested); From drains then,
	// or after its PrepareWait without it.
	Prepared bool `json:"prepared,omitempty"`
	// Released: From disconnected its imports of the volume's members
	// after its drain (engine frozen, members flushed), before it resigned
	// the owner key at Epoch, so the drive exporters may drop From from
	// the allowed hosts without ending controllers (and the target's
	// prepared imports with them). From clears it before it acquires the
	// volume again; void in a failed move.
	Released bool `json:"released,omitempty"`
	// ToEpoch is the epoch To serves at (phase done).
	ToEpoch uint64 `json:"to_epoch,omitempty"`
	Error   string `json:"error,omitempty"`
	// PauseSeconds is how long From's export was inaccessible before To
	// served (phase done): an upper bound of the consumers' I/O pause.
	PauseSeconds float64   `json:"pause_seconds,omitempty"`
	Asked        time.Time `json:"asked"`
	Updated      time.Time `json:"updated"`
}

// Over says whether the move has ended.
func (m Move) Over() bool { return m.Phase == MoveDone || m.Phase == MoveFailed }

// NodePaths are a node's NVMe controllers to the volume exports, the
// value at keys.Paths(Node), on the node's status lease: the evidence an
// old owner waits for before it removes its export.
type NodePaths struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
	// Volumes maps a volume UUID to this node's controllers of it.
	Volumes map[string][]Path `json:"volumes"`
}

// Path is one controller of a consumer: the target address it connects
// to and its state ("live", "connecting", "resetting", ...).
type Path struct {
	Address string `json:"address"`
	State   string `json:"state"`
}
