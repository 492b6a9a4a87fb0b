package fabrictls

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Mode is the nvme_tls setting.
type Mode string

// The modes (see the package documentation).
const (
	Off      Mode = "off"
	On       Mode = "on"
	Required Mode = "required"
)

// ParseMode parses an nvme_tls value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, On, Required:
		return m, nil
	}
	return "", fmt.Errorf("nvme_tls %q: want off, on or required", s)
}

// What a node's drive ports offer, as its registry record says
// (model.Node.NVMeTLS).
const (
	PortsPlain    = ""         // no TLS
	PortsOptional = "optional" // TLS 1.3 or plain (addr_treq "not required")
	PortsRequired = "required" // TLS 1.3 only
)

// Support is what one node has for NVMe/TCP TLS on one side (target or
// host). The zero value supports nothing.
type Support struct {
	// Kernel: the target's nvmet takes addr_tsas tls1.3
	// (NVME_TARGET_TCP_TLS), or the host's /dev/nvme-fabrics accepts the
	// tls option (NVME_TCP_TLS).
	Kernel bool
	// Keyring: the kernel's .nvme keyring exists (nvme_keyring).
	Keyring bool
	// TLSHD: a tlshd process runs (ktls-utils): it does the handshakes.
	TLSHD bool
}

// OK says whether the side can do TLS.
func (s Support) OK() bool { return s.Kernel && s.Keyring && s.TLSHD }

// Missing names what the side lacks; kernelOption is the kernel option
// of the side (NVME_TARGET_TCP_TLS or NVME_TCP_TLS). Empty when OK.
func (s Support) Missing(kernelOption string) string {
	var m []string
	if !s.Kernel {
		m = append(m, "a kernel with "+kernelOption)
	}
	if !s.Keyring {
		m = append(m, "the .nvme keyring (modprobe nvme_keyring)")
	}
	if !s.TLSHD {
		m = append(m, "tlshd running (ktls-utils, with keyrings=.nvme in tlshd.conf)")
	}
	return strings.Join(m, ", ")
}

// Kernel options named in messages.
const (
	TargetOption = "NVME_TARGET_TCP_TLS"
	HostOption   = "NVME_TCP_TLS"
)

// ErrRequired is wrapped by the refusals of Required.
var ErrRequired = errors.New("nvme_tls = required")

// Target is what this node's drive ports offer under mode m with the
// target side's support s: PortsOptional or PortsRequired, or PortsPlain.
// An error (Required without support) means export nothing; it names
// what is missing. Pure.
func Target(m Mode, s Support) (string, error) {
	switch {
	case m == Off || m == "":
		return PortsPlain, nil
	case !s.OK() && m == Required:
		return PortsPlain, fmt.Errorf("exports refused: %w and this node's NVMe target cannot do TLS: it lacks %s; "+
			"fix that, or set nvme_tls = on or off", ErrRequired, s.Missing(TargetOption))
	case !s.OK():
		return PortsPlain, nil
	case m == Required:
		return PortsRequired, nil
	}
	return PortsOptional, nil
}

// Host says whether a member connection from this node (mode m, host
// side support s) to a node whose ports offer ports uses TLS. An error
// means do not connect (it would fail or go without TLS against the
// setting); it says why. Pure.
func Host(m Mode, s Support, ports string) (bool, error) {
	switch {
	case m == Required && !s.OK():
		return false, fmt.Errorf("imports refused: %w and this node cannot connect with TLS: it lacks %s", ErrRequired, s.Missing(HostOption))
	case m == Required && ports == PortsPlain:
		return false, fmt.Errorf("%w here and the exporting node offers no TLS (its nvme_tls is off, or its target cannot do TLS; see its fabraid doctor)", ErrRequired)
	case ports == PortsRequired && (m == Off || m == ""):
		return false, errors.New("the exporting node requires TLS and nvme_tls = off here")
	case ports == PortsRequired && !s.OK():
		return false, fmt.Errorf("the exporting node requires TLS and this node cannot connect with it: it lacks %s", s.Missing(HostOption))
	case m == Off || m == "" || ports == PortsPlain || !s.OK():
		return false, nil
	}
	return true, nil
}

// pairSalt separates these PSKs from any other use of the host secret.
const pairSalt = "fabraid nvme-tls pair psk v1"

// PairPSK is the configured PSK (SHA-256 transform, 32 bytes) of the pair
// hostNQN, subNQN, derived from the host's DH-HMAC-CHAP secret (DHHC-1
// text, as both ends hold it): HKDF-SHA-256 with salt pairSalt and info
// hostNQN NUL subNQN. Pure.
func PairPSK(hostSecret nvmf.SecretText, hostNQN, subNQN string) (nvmetls.PSK, error) {
	if hostSecret == "" {
		return nvmetls.PSK{}, fmt.Errorf("TLS PSK of %s for %s: the host has no DH-HMAC-CHAP secret to derive it from", hostNQN, subNQN)
	}
	k, err := hkdf.Key(sha256.New, []byte(hostSecret.Reveal()), []byte(pairSalt), hostNQN+"\x00"+subNQN, 32)
	if err != nil {
		return nvmetls.PSK{}, fmt.Errorf("TLS PSK of %s for %s: %w", hostNQN, subNQN, err)
	}
	return nvmetls.PSK{Hash: nvmetls.SHA256, Key: k}, nil
}

// PairKey is what both ends put into the .nvme keyring for the pair: the
// identity and TLS PSK of PairPSK (kernel/nvmetls Derive). Pure.
func PairKey(hostSecret nvmf.SecretText, hostNQN, subNQN string) (nvmetls.Derived, error) {
	p, err := PairPSK(hostSecret, hostNQN, subNQN)
	if err != nil {
		return nvmetls.Derived{}, err
	}
	d, err := p.Derive(hostNQN, subNQN)
	if err != nil {
		return nvmetls.Derived{}, fmt.Errorf("TLS PSK of %s for %s: %w", hostNQN, subNQN, err)
	}
	return d, nil
}

// Keys is where pair keys go before a port or connection uses them
// (KernelKeys: the .nvme keyring). Insert is idempotent. Identities lists
// the identities of the PSKs there (anyone's, not only fabraid's);
// Remove takes the PSK with the identity there out of use, and no other.
type Keys interface {
	Insert(d nvmetls.Derived) error
	Identities() ([]string, error)
	Remove(identity string) error
}

// InsertKeys puts keys into ks, in order; the error names the key by
// identity only.
func InsertKeys(ks Keys, keys []nvmetls.Derived) error {
	for _, k := range keys {
		if err := ks.Insert(k); err != nil {
			return fmt.Errorf("TLS key %s: %w", k.Identity, err)
		}
	}
	return nil
}

// InKeyring returns the live psk keys of keys whose serial is in members
// (a keyring's serials, nvmetls.Members), in the order of keys: the keys
// of that keyring that KernelKeys lists and may revoke. Pure.
func InKeyring(keys []nvmetls.ProcKey, members []int) []nvmetls.ProcKey {
	var in []nvmetls.ProcKey
	for _, k := range keys {
		if k.Type == "psk" && k.Live() && slices.Contains(members, k.ID) {
			in = append(in, k)
		}
	}
	return in
}

// SplitIdentity returns the host and subsystem NQN of a version 0 PSK
// identity ("NVMe0R<hh> <hostnqn> <subnqn>", nvmetls.Identity); ok is
// false for any other shape. Pure.
func SplitIdentity(id string) (hostNQN, subNQN string, ok bool) {
	f := strings.Fields(id)
	if len(f) != 3 || !strings.HasPrefix(f[0], "NVMe0R") {
		return "", "", false
	}
	return f[1], f[2], true
}

// StaleKeys returns the identities of present that owned claims for this
// side (by host and subsystem NQN) and keep does not hold, sorted. Keys
// that are not version 0 identities or not owned are never stale. Pure.
func StaleKeys(present []string, keep []nvmetls.Derived, owned func(hostNQN, subNQN string) bool) []string {
	kept := map[string]bool{}
	for _, k := range keep {
		kept[k.Identity] = true
	}
	var stale []string
	for _, id := range present {
		h, s, ok := SplitIdentity(id)
		if ok && !kept[id] && owned(h, s) {
			stale = append(stale, id)
		}
	}
	slices.Sort(stale)
	return slices.Compact(stale)
}

// PruneKeys removes from ks the stale keys (StaleKeys) and returns their
// identities (identities only: a key is never in an error or a log).
func PruneKeys(ks Keys, keep []nvmetls.Derived, owned func(hostNQN, subNQN string) bool) ([]string, error) {
	present, err := ks.Identities()
	if err != nil {
		return nil, fmt.Errorf("list TLS keys: %w", err)
	}
	stale := StaleKeys(present, keep, owned)
	for i, id := range stale {
		if err := ks.Remove(id); err != nil {
			return stale[:i], fmt.Errorf("remove stale TLS key %s: %w", id, err)
		}
	}
	return stale, nil
}
