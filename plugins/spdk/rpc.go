package spdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fabraid/fabraid/plugins/backend"
)

// DefaultSocket is nvmf_tgt's default JSON-RPC socket (spdk_rpc_socket).
const DefaultSocket = "/var/tmp/spdk.sock"

// RPCError is a JSON-RPC error object as SPDK returns it.
type RPCError struct {
	Method  string
	Code    int
	Message string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("spdk %s: %s (%d)", e.Method, e.Message, e.Code)
}

// Client speaks SPDK's JSON-RPC 2.0 over its unix socket: one JSON object
// per request, the reply one JSON object (SPDK adds a newline). Requests
// always carry an id (SPDK does not answer notifications). One call at a
// time.
type Client struct {
	Socket string
	mu     sync.Mutex
	conn   net.Conn
	dec    *json.Decoder
	id     int
}

type request struct {
	Version string `json:"jsonrpc"`
	Method  string `json:"method"`
	ID      int    `json:"id"`
	Params  any    `json:"params,omitempty"`
}

type response struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Call sends method with params (nil: none) and decodes the result into
// out (nil: ignore). SPDK errors are *RPCError; a socket failure is
// backend.ErrTransient (nvmf_tgt restarting) and reconnects next time.
func (c *Client) Call(ctx context.Context, method string, params, out any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connect(ctx); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	} else {
		_ = c.conn.SetDeadline(time.Time{})
	}
	c.id++
	b, err := json.Marshal(request{Version: "2.0", Method: method, ID: c.id, Params: params})
	if err != nil {
		return fmt.Errorf("spdk %s: %w", method, err)
	}
	var resp response
	if _, err = c.conn.Write(b); err == nil {
		err = c.dec.Decode(&resp)
	}
	if err != nil {
		c.close()
		return fmt.Errorf("spdk %s on %s: %w: %w", method, c.Socket, backend.ErrTransient, err)
	}
	if resp.ID != c.id {
		c.close()
		return fmt.Errorf("spdk %s: reply id %d, want %d: %w", method, resp.ID, c.id, backend.ErrTransient)
	}
	if resp.Error != nil {
		return &RPCError{Method: method, Code: resp.Error.Code, Message: resp.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("spdk %s: decode result: %w", method, err)
		}
	}
	return nil
}

func (c *Client) connect(ctx context.Context) error {
	if c.conn != nil {
		return nil
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return fmt.Errorf("spdk: connect %s (is nvmf_tgt running?): %w: %w", c.Socket, backend.ErrTransient, err)
	}
	c.conn, c.dec = conn, json.NewDecoder(conn)
	return nil
}

func (c *Client) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.dec = nil, nil
	}
}

// Close drops the connection.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.close()
}

// classify maps an SPDK error to a typed backend error. Many refusals are
// a bare -32602 "Invalid parameters": the backend reads the state before
// changing it, so one seen here means the request itself (or a race with
// another RPC client) is at fault.
func classify(err error) error {
	var re *RPCError
	if !errors.As(err, &re) {
		return err
	}
	var kind error
	switch {
	case re.Code == -19 || re.Code == -2: // ENODEV, ENOENT
		kind = backend.ErrNotFound
	case re.Code == -17: // EEXIST
		kind = backend.ErrConflict
	case re.Code == -32601:
		kind = backend.ErrNotSupported
	case re.Code == -1: // startup-only RPC at runtime
		kind = backend.ErrNotSupported
	case re.Code == -32603 && re.Message == "error setting ANA state: -22":
		kind = backend.ErrNotSupported // no ana_reporting, or no such listener (checked first)
	case re.Code == -32603 && len(re.Message) > 25 && re.Message[:25] == "Unable to create subsyste":
		kind = backend.ErrConflict // exists (NQNs are validated before)
	case re.Code == -32603 && len(re.Message) > 15 && re.Message[:15] == "Transport type ":
		kind = backend.ErrConflict
	case re.Code == -32603 && re.Method == "nvmf_subsystem_remove_host":
		kind = backend.ErrNotFound // "Internal error": host not allowed
	case re.Code == -32603: // "Internal error": duplicate host (NQNs validated before)
		kind = backend.ErrConflict
	default: // -32602, -32600, -22
		kind = backend.ErrInvalid
	}
	return fmt.Errorf("%w: %w", kind, err)
}
