package backend

import (
	"context"
	"encoding/json"
	"fmt"
)

// ProtocolVersion is the newest interface version this package speaks.
const ProtocolVersion = 1

// Backend is an NVMe-oF target backend. Every method is safe to retry.
type Backend interface {
	// Features reports what the target supports.
	Features(ctx context.Context) (Features, error)
	// Apply converges the exports of req.Scope to req.Exports and reports
	// whether anything changed. Idempotent.
	Apply(ctx context.Context, req ApplyRequest) (ApplyResult, error)
	// List returns the actual exports whose NQN starts with scope.
	List(ctx context.Context, scope string) ([]Export, error)
	// SetANAState sets the state of one ANA group on one listener of an
	// export. ErrNotFound when the export or listener does not exist.
	SetANAState(ctx context.Context, req ANARequest) error
	// Remove drops the export nqn. ErrNotFound when there is none.
	Remove(ctx context.Context, nqn string) error
}

// Features is what a backend (and the target behind it) supports.
type Features struct {
	Name    string // "nvmet", "spdk", ...
	Version string // the target's version, when it tells
	// Auth: DH-HMAC-CHAP host keys can be set (Host.DHCHAPKey).
	Auth bool
	// ANA: listeners report and change ANA states.
	ANA bool
	// CntlIDRange: Export.CntlIDMin/Max are applied (else Apply refuses
	// an export that sets them with ErrNotSupported).
	CntlIDRange bool
	// Transports the target serves ("tcp", "rdma", ...).
	Transports []string
	// TLS: tcp listeners can take TLS 1.3 with a PSK (Listener.TLS; the
	// kernel backend: nvmet ports take addr_tsas tls1.3).
	TLS bool
}

// ApplyRequest is the desired state of one scope.
type ApplyRequest struct {
	// Scope is the NQN prefix the caller owns (e.g.
	// "nqn.2026-11.io.fabraid:drive:"); every Export must start with it.
	Scope   string
	Exports []Export
}

// ApplyResult tells what Apply did.
type ApplyResult struct {
	Changed bool
	// Ops describes the changes made, in order (no secrets).
	Ops []string
}

// Export is one NVMe subsystem with its namespaces, listeners and allowed
// hosts. fabraid never exports to any host: Hosts lists them all.
type Export struct {
	NQN    string
	Serial string // at most 20 printable ASCII characters
	Model  string // at most 40
	// CntlIDMin..CntlIDMax bound the controller ids the export hands
	// out; 0 and 0: the target's default (1..0xffef). A Linux host
	// refuses a second controller of one NQN with a controller id it
	// already has, so nodes exporting the same NQN (a volume's old and
	// new owner) use disjoint ranges. Applied when the export is created.
	CntlIDMin  uint16
	CntlIDMax  uint16
	Namespaces []Namespace
	Listeners  []Listener
	Hosts      []Host
}

// Namespace is one namespace of an Export.
type Namespace struct {
	NSID uint32
	// Device is the block device (or file) exported.
	Device string
	// UUID and NGUID identify the namespace to hosts (native multipath
	// groups paths by them): the same on every node exporting a volume.
	UUID  string // dashed
	NGUID string // 32 hex digits
	// ANAGroup is the namespace's ANA group; 0 means 1.
	ANAGroup uint32
}

// Listener is a transport address an Export is reachable on.
type Listener struct {
	Transport string // "tcp"
	Address   string // IP address
	ServiceID string // TCP port, e.g. "4420"
	// PortID is the kernel nvmet port id for this address (unused by
	// other backends); 0 lets the backend choose.
	PortID uint16
	// ANAStates holds the desired ANA state per group ("optimized",
	// "non-optimized", "inaccessible"); groups not listed are left alone.
	ANAStates map[uint32]string
	// Unlinked keeps the listener (the target's port and its ANA states)
	// but not the export on it: the export's controllers there are torn
	// down and no host reaches it through it. A caller that must know
	// the export is off the listener checks List. (volmgr unlinks a
	// frozen engine's export this way before it stops the engine; the
	// kernel target waits for in-flight requests when a port is removed.)
	Unlinked bool
	// TLS makes a tcp listener take TLS 1.3 connections with a PSK from
	// the .nvme keyring (NVMe TP 8011; nvmet addr_tsas tls1.3), and
	// TLSOptional lets it take plain ones too (addr_treq "not
	// required"); without TLSOptional it takes nothing else. A backend
	// without Features.TLS ignores both: the caller checks List.
	TLS, TLSOptional bool
}

// Host is a host NQN allowed to connect, with optional DH-HMAC-CHAP keys.
type Host struct {
	NQN           string
	DHCHAPKey     Secret // DHHC-1 form; empty: no authentication
	DHCHAPCtrlKey Secret // bidirectional authentication when set
}

// ANARequest is SetANAState's argument.
type ANARequest struct {
	NQN      string
	Listener Listener // Transport, Address, ServiceID identify it
	Group    uint32   // 0 means 1
	State    string
}

// Secret is a value that must never be logged: every fmt verb and JSON
// print "<secret>" (or "" when empty). Only the gob wire codec carries
// the value (GobEncode).
type Secret string

// String redacts.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "<secret>"
}

// GoString redacts (%#v).
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// Format redacts for every verb, %x and %q included.
func (s Secret) Format(f fmt.State, verb rune) {
	_, _ = f.Write([]byte(s.String()))
}

// MarshalJSON redacts: structured loggers (hclog's JSON output, which
// go-plugin forwards) marshal values with encoding/json.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// GobEncode carries the value on the plugin wire.
func (s Secret) GobEncode() ([]byte, error) { return []byte(s), nil }

// GobDecode reads the value from the plugin wire.
func (s *Secret) GobDecode(b []byte) error { *s = Secret(b); return nil }

// Reveal returns the secret value, for handing it to the target.
func (s Secret) Reveal() string { return string(s) }
