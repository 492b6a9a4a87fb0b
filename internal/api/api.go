package api

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/fabraid/fabraid/internal/unixjson"
)

// Node describes the daemon's node.
type Node struct {
	Name    string `json:"name"`
	HostNQN string `json:"hostnqn"`
	Version string `json:"version"`
	PID     int    `json:"pid"`
}

// OpRequest is the body of the volume operations.
type OpRequest struct {
	Slot   int    `json:"slot"`
	Drive  string `json:"drive,omitempty"`
	Rate   int64  `json:"rate,omitempty"`
	Repair bool   `json:"repair,omitempty"`
	// Force (fail): carry out a fail that would lose a group (the volume
	// fails); without it such a fail is refused and nothing changes.
	Force bool `json:"force,omitempty"`
	// Node (replace, in a cluster): the node of the new member; with
	// Drive (its claim id there) or alone (any free drive of it).
	Node string `json:"node,omitempty"`
}

// OpReply is the answer to a volume operation. In the one-node mode and
// for an operation the owner has carried out it is empty but for a
// replace's new member; a request the owner has not finished within the
// wait (HTTP 202) has its id, state and a Message to print.
type OpReply struct {
	Request string `json:"request,omitempty"`
	Owner   string `json:"owner,omitempty"`
	State   string `json:"state,omitempty"` // "pending", "running", "done"
	Message string `json:"message,omitempty"`
	// Node and Drive (replace in a cluster): the new member.
	Node  string `json:"node,omitempty"`
	Drive string `json:"drive,omitempty"`
}

// Error is an error reply; Status is the HTTP status.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// ErrNoDaemon is wrapped when the socket does not answer.
var ErrNoDaemon = errors.New("fabraidd is not running")

// Client talks to fabraidd. It is safe for concurrent use.
type Client struct {
	uc *unixjson.Client
}

// NewClient returns a client for the daemon listening on socket.
func NewClient(socket string) *Client {
	return &Client{uc: unixjson.New(socket, "fabraidd", 5*time.Minute)}
}

func (c *Client) do(method, path string, in, out any) error {
	err := c.uc.Do(method, path, in, out)
	var se *unixjson.StatusError
	switch {
	case errors.Is(err, unixjson.ErrUnreachable):
		return fmt.Errorf("%w: %v", ErrNoDaemon, err)
	case errors.As(err, &se):
		return &Error{Status: se.Status, Message: se.Message}
	}
	return err
}

// Node returns the node.
func (c *Client) Node() (Node, error) {
	var n Node
	return n, c.do("GET", "/v1/node", nil, &n)
}

// Volumes lists the volumes.
func (c *Client) Volumes() ([]Volume, error) {
	var v []Volume
	return v, c.do("GET", "/v1/volumes", nil, &v)
}

// Volume returns one volume by name or UUID.
func (c *Client) Volume(ref string) (Volume, error) {
	var v Volume
	return v, c.do("GET", "/v1/volumes/"+url.PathEscape(ref), nil, &v)
}

// Create creates a volume.
func (c *Client) Create(r CreateRequest) (Volume, error) {
	var v Volume
	return v, c.do("POST", "/v1/volumes", r, &v)
}

// Delete deletes a volume.
func (c *Client) Delete(ref string) error {
	return c.do("DELETE", "/v1/volumes/"+url.PathEscape(ref), nil, nil)
}

// Request waits a while (the daemon's bound) for request id of volume ref
// (an OpReply's Request) and returns its state: an empty Request when the
// owner has carried it out, the owner's refusal as an error, or the
// request's id and state when it is not done yet.
func (c *Client) Request(ref, id string) (OpReply, error) {
	var out OpReply
	return out, c.do("GET", "/v1/volumes/"+url.PathEscape(ref)+"/requests/"+url.PathEscape(id), nil, &out)
}

// Op runs a volume operation: fail, replace, re-add, rebuild or scrub.
func (c *Client) Op(ref, op string, r OpRequest) (OpReply, error) {
	var out OpReply
	return out, c.do("POST", "/v1/volumes/"+url.PathEscape(ref)+"/"+op, r, &out)
}

// MoveRequest is the body of POST /v1/volumes/{ref}/move.
type MoveRequest struct {
	Node string `json:"node"` // the new owner
	// Wait: answer when the move has ended (the old owner removed its
	// export), not when it was recorded.
	Wait bool `json:"wait,omitempty"`
}

// MoveReply is the move record's state (docs/cluster.md, "Planned move").
type MoveReply struct {
	Volume  string `json:"volume"`
	From    string `json:"from"`
	To      string `json:"to"`
	Phase   string `json:"phase"` // requested, resigned, done, failed
	Epoch   uint64 `json:"epoch"`
	ToEpoch uint64 `json:"to_epoch,omitempty"`
	Error   string `json:"error,omitempty"`
	// PauseSeconds bounds the consumers' I/O pause: how long the old
	// owner's export was inaccessible before it saw the new owner serve.
	PauseSeconds float64 `json:"pause_seconds,omitempty"`
}

// DrainRequest is the body of POST /v1/nodes/{name}/drain.
type DrainRequest struct {
	// Wait: answer when the node owns no volume any more (or a move
	// failed), not when the drain was recorded.
	Wait bool `json:"wait,omitempty"`
}

// DrainReply says what a drained node still owns.
type DrainReply struct {
	Node    string `json:"node"`
	Drained bool   `json:"drained"`
	// Owned are the volumes whose record still names the node as owner,
	// Moves their move records (if any).
	Owned []string    `json:"owned,omitempty"`
	Moves []MoveReply `json:"moves,omitempty"`
	// Stuck says why a volume cannot move away (no other node may own it).
	Stuck []string `json:"stuck,omitempty"`
}

// Drain marks node drained (it owns no volume: the ones it owns move to
// other nodes) or, with drained false, not any more (a cluster).
func (c *Client) Drain(node string, drained bool, r DrainRequest) (DrainReply, error) {
	var out DrainReply
	method := "POST"
	if !drained {
		method = "DELETE"
	}
	return out, c.do(method, "/v1/nodes/"+url.PathEscape(node)+"/drain", r, &out)
}

// Attach sets the nodes volume ref is attached to (POST
// /v1/volumes/{ref}/attach).
func (c *Client) Attach(ref string, r AttachRequest) (Volume, error) {
	var out Volume
	return out, c.do("POST", "/v1/volumes/"+url.PathEscape(ref)+"/attach", r, &out)
}

// Move asks for the move of volume ref to node (a cluster).
func (c *Client) Move(ref string, r MoveRequest) (MoveReply, error) {
	var out MoveReply
	return out, c.do("POST", "/v1/volumes/"+url.PathEscape(ref)+"/move", r, &out)
}
