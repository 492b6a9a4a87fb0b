package volmgr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fabraid/fabraid/internal/unixjson"
)

// Engine protocol
//
// The daemon and an engine process speak JSON over HTTP on the engine's
// unix socket. Engines outlive daemon upgrades (children are adopted,
// systemd units keep running), so the two ends may be of different
// versions, and the protocol is versioned:
//
//   - Protocol n's requests live under /v<n>/ (/v1/status, /v1/fail, ...).
//     Protocol 0 is the unversioned API of engines from before versioning
//     (/status, /fail, ...): the same requests as protocol 1.
//   - GET /v1/version answers EngineVersion: the newest protocol the
//     engine serves, the oldest it still serves, its binary version and
//     pid. Every engine of protocol 1 or later serves it; an engine that
//     answers 404 there is of protocol 0.
//   - On first contact (and again after the socket stopped answering) the
//     daemon asks for the version and speaks the newest protocol both
//     ends know. When there is none (the engine is older than the
//     daemon's oldest protocol, or its oldest is newer than the daemon's
//     newest), the daemon sends it nothing else: every call fails with
//     ErrEngineProtocol, whose message says how to restart the engine
//     with the installed binary (a ublk user recovery: consumers pause),
//     and volume show prints it.
//   - Within a protocol, changes are additive: unknown JSON fields are
//     ignored by both ends (encoding/json's default), absent ones are
//     zero. A change an older peer would misread gets a new protocol
//     number, and the engine keeps serving the old one for at least one
//     release.

const (
	// EngineProtocol is the newest engine protocol this build speaks and
	// serves.
	EngineProtocol = 1
	// EngineProtocolMin is the oldest engine protocol this build's daemon
	// speaks and its engine serves.
	EngineProtocolMin = 0
)

// EngineVersion is an engine's answer to GET /v1/version.
type EngineVersion struct {
	Protocol    int    `json:"protocol"`     // newest protocol served
	MinProtocol int    `json:"min_protocol"` // oldest protocol served
	Version     string `json:"version"`      // binary version
	PID         int    `json:"pid"`
}

// ErrEngineProtocol is wrapped when an engine speaks no protocol this
// daemon knows.
var ErrEngineProtocol = errors.New("engine protocol not supported")

// protoRange is the range of protocols a daemon speaks.
type protoRange struct{ min, max int }

var daemonProtocols = protoRange{EngineProtocolMin, EngineProtocol}

// Per-request timeouts of engine calls: a hung engine must not hold a
// caller (reconcile, volume show) longer than this.
const (
	engineStatusTimeout = 10 * time.Second
	engineCallTimeout   = 30 * time.Second
)

// negotiate returns the protocol to speak with the engine ev describes, or
// an ErrEngineProtocol error saying why there is none; restart says how to
// restart the engine.
func negotiate(ev EngineVersion, r protoRange, restart string) (int, error) {
	p := min(ev.Protocol, r.max)
	switch {
	case ev.Protocol < r.min:
		return 0, fmt.Errorf("%w: engine protocol %d (binary %s) is older than this fabraidd supports (%d..%d): restart the engine with %s — a ublk recovery, consumers pause",
			ErrEngineProtocol, ev.Protocol, versionOr(ev.Version), r.min, r.max, restart)
	case p < ev.MinProtocol:
		return 0, fmt.Errorf("%w: engine protocol %d..%d (binary %s) is newer than this fabraidd understands (%d..%d): upgrade fabraidd, or restart the engine with %s — a ublk recovery, consumers pause",
			ErrEngineProtocol, ev.MinProtocol, ev.Protocol, versionOr(ev.Version), r.min, r.max, restart)
	}
	return p, nil
}

func versionOr(v string) string {
	if v == "" {
		return "unknown"
	}
	return v
}

// protoPrefix is the path prefix of protocol p's requests.
func protoPrefix(p int) string {
	if p == 0 {
		return ""
	}
	return fmt.Sprintf("/v%d", p)
}

// engineProto is the daemon side of the handshake with one engine socket.
type engineProto struct {
	r protoRange
	// restart says how to restart the engine (for error messages).
	restart func(EngineVersion) string

	mu     sync.Mutex
	known  bool
	prefix string
}

// path returns the request path of p under the negotiated protocol,
// asking the engine for its version first when not known yet.
func (ep *engineProto) path(ctx context.Context, uc *unixjson.Client, p string) (string, error) {
	ep.mu.Lock()
	known, prefix := ep.known, ep.prefix
	ep.mu.Unlock()
	if known {
		return prefix + p, nil
	}
	var ev EngineVersion
	err := uc.DoContext(ctx, "GET", "/v1/version", nil, &ev)
	var se *unixjson.StatusError
	switch {
	case errors.As(err, &se) && se.Status == http.StatusNotFound:
		ev = EngineVersion{} // protocol 0: no version request
	case err != nil:
		return "", fmt.Errorf("engine version: %w", err)
	}
	restart := "a restart of its unit or process"
	if ep.restart != nil {
		restart = ep.restart(ev)
	}
	n, err := negotiate(ev, ep.r, restart)
	if err != nil {
		return "", err
	}
	ep.mu.Lock()
	ep.known, ep.prefix = true, protoPrefix(n)
	ep.mu.Unlock()
	return protoPrefix(n) + p, nil
}

// reset forgets the negotiated protocol: the engine behind the socket may
// have been replaced.
func (ep *engineProto) reset() {
	ep.mu.Lock()
	ep.known = false
	ep.mu.Unlock()
}

// handleVersions registers h for "METHOD /path" under every protocol
// prefix this engine serves.
func handleVersions(mux *http.ServeMux, method, path string, h http.HandlerFunc) {
	for p := EngineProtocolMin; p <= EngineProtocol; p++ {
		mux.HandleFunc(method+" "+protoPrefix(p)+path, h)
	}
}
