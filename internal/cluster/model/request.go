package model

import "time"

// RequestVersion is the schema version of Request; readers refuse newer.
const RequestVersion = 1

// Request states (Request.State). A request moves pending -> running ->
// done or failed, each step a compare-and-swap on its key's revision, so
// it is carried out at most once.
const (
	RequestPending = "pending" // written by the requester
	RequestRunning = "running" // claimed by the owner, being carried out
	RequestDone    = "done"
	RequestFailed  = "failed"
)

// Request is an engine operation of a volume asked on any node and
// carried out by the volume's owner, the value at keys.Request(Volume, ID).
type Request struct {
	Version int    `json:"version"`
	ID      string `json:"id"`     // 16 lower-case hex digits, random
	Volume  string `json:"volume"` // volume UUID (canonical)
	// Op is "fail", "re-add", "rebuild", "scrub" or "replace".
	Op     string `json:"op"`
	Slot   int    `json:"slot"`
	Force  bool   `json:"force,omitempty"`
	Repair bool   `json:"repair,omitempty"`
	Rate   int64  `json:"rate,omitempty"`
	// Node and Drive (replace): the new member of Slot, written into the
	// volume record in the request's own transaction.
	Node        string    `json:"node,omitempty"`
	Drive       string    `json:"drive,omitempty"`
	RequestedBy string    `json:"requested_by"`
	Created     time.Time `json:"created"`
	State       string    `json:"state"`
	// By is the owner that claimed the request.
	By string `json:"by,omitempty"`
	// Error is the owner's error text (state failed) and Code the HTTP
	// status the owner's API gives it.
	Error    string    `json:"error,omitempty"`
	Code     int       `json:"code,omitempty"`
	Finished time.Time `json:"finished,omitzero"`
}

// Done says whether r has its result (done or failed).
func (r Request) Done() bool { return r.State == RequestDone || r.State == RequestFailed }
