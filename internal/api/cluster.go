package api

import (
	"net/url"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// ClusterInitRequest is the body of POST /v1/cluster/init.
type ClusterInitRequest struct {
	Name string `json:"name,omitempty"` // default "fabraid"
}

// TokenRequest is the body of POST /v1/cluster/tokens.
type TokenRequest struct {
	TTLSeconds int64 `json:"ttl_seconds,omitempty"` // default 3600
}

// TokenReply carries a new join token.
type TokenReply struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// JoinRequest is the body of POST /v1/cluster/join.
type JoinRequest struct {
	Address string `json:"address"` // host[:port] of a member's join service
	Token   string `json:"token"`
}

// LeaveRequest is the body of POST /v1/cluster/leave.
type LeaveRequest struct {
	Force bool `json:"force,omitempty"`
}

// ClusterStatus is GET /v1/cluster.
type ClusterStatus = model.Status

// ClusterStatus returns the cluster's members, health and nodes.
func (c *Client) ClusterStatus() (ClusterStatus, error) {
	var s ClusterStatus
	return s, c.do("GET", "/v1/cluster", nil, &s)
}

// ClusterInit makes a cluster with this node as its first member.
func (c *Client) ClusterInit(name string) error {
	return c.do("POST", "/v1/cluster/init", ClusterInitRequest{Name: name}, nil)
}

// ClusterToken makes a join token valid for ttl.
func (c *Client) ClusterToken(ttl time.Duration) (TokenReply, error) {
	var t TokenReply
	return t, c.do("POST", "/v1/cluster/tokens", TokenRequest{TTLSeconds: int64(ttl / time.Second)}, &t)
}

// ClusterJoin joins the cluster at address with token.
func (c *Client) ClusterJoin(address, token string) error {
	return c.do("POST", "/v1/cluster/join", JoinRequest{Address: address, Token: token}, nil)
}

// ClusterLeave takes this node out of its cluster.
func (c *Client) ClusterLeave(force bool) error {
	return c.do("POST", "/v1/cluster/leave", LeaveRequest{Force: force}, nil)
}

// RotateKeysReply is the answer of POST /v1/cluster/rotate-keys.
type RotateKeysReply struct {
	// Rotated names the secrets rotated ("controller").
	Rotated []string `json:"rotated"`
	// Seconds from the rotation until this node's target presented the
	// new key and it was published (controller), or until this node's
	// controllers presented the new key (host).
	Seconds float64 `json:"seconds"`
	// NotAcknowledged are the nodes that had not acknowledged a new host
	// key when the wait ended and the node switched to it regardless:
	// their exports to this node fence when they apply it.
	NotAcknowledged []string `json:"not_acknowledged,omitempty"`
}

// RotateKeysRequest is the body of POST /v1/cluster/rotate-keys: Host
// rotates the host secret instead of the controller secret.
type RotateKeysRequest struct {
	Host bool `json:"host,omitempty"`
}

// ClusterEnableRBAC turns on etcd RBAC in a cluster made before it
// (idempotent; refused on a client-only node).
func (c *Client) ClusterEnableRBAC() error {
	return c.do("POST", "/v1/cluster/rbac", nil, nil)
}

// ClusterRotateKeys rotates this node's DH-HMAC-CHAP controller secret,
// or with host its host secret.
func (c *Client) ClusterRotateKeys(host bool) (RotateKeysReply, error) {
	var out RotateKeysReply
	err := c.do("POST", "/v1/cluster/rotate-keys", RotateKeysRequest{Host: host}, &out)
	return out, err
}

// ClusterRemove removes a dead node.
func (c *Client) ClusterRemove(node string) error {
	return c.do("DELETE", "/v1/cluster/nodes/"+url.PathEscape(node), nil, nil)
}
