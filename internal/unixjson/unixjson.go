// Package unixjson is the small JSON-over-HTTP client that fabraid's own
// processes use on unix sockets: the CLI talking to fabraidd, and fabraidd
// talking to each volume's engine process.
package unixjson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ErrUnreachable is wrapped when nothing answers on the socket (absent,
// refused, timed out).
var ErrUnreachable = errors.New("unix socket does not answer")

// StatusError is a non-2xx answer: the HTTP status and the server's
// {"error": "..."} message (the status text when it sent none).
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string { return e.Message }

// Client sends JSON requests to one unix socket. It is safe for concurrent
// use.
type Client struct {
	socket string
	host   string
	hc     *http.Client
}

// New returns a client for socket; host only names the peer in request
// URLs (and so in logs); timeout bounds each request.
func New(socket, host string, timeout time.Duration) *Client {
	return &Client{socket: socket, host: host, hc: &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}}
}

// Socket returns the socket path.
func (c *Client) Socket() string { return c.socket }

// Do sends in (when not nil) as a JSON body and decodes a 2xx answer into
// out (when not nil). A transport failure wraps ErrUnreachable; a non-2xx
// answer is a *StatusError.
func (c *Client) Do(method, path string, in, out any) error {
	return c.DoContext(context.Background(), method, path, in, out)
}

// DoContext is Do bounded by ctx as well as by the client's timeout.
func (c *Client) DoContext(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.host+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w (%s): %v", ErrUnreachable, c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		if e.Error == "" {
			e.Error = resp.Status
		}
		return &StatusError{Status: resp.StatusCode, Message: e.Error}
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}
