package exporter

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// NQNPrefix is the subsystem NQN prefix of exported drives.
const NQNPrefix = "nqn.2026-11.io.fabraid:drive:"

// PortBase is the nvmet port id of the first storage address; address i
// gets PortBase+i (kernel/nvmet DriveOwnership owns 18100..18199).
const PortBase = 18100

// MaxAddresses is how many storage addresses fit the port range (18199,
// the last id, is kernel/nvmet's feature probe port).
const MaxAddresses = 99

// DefaultServiceID is the TCP port drives are exported on. It differs from
// the volume export port (4420): one nvmet address and port can be one
// configfs port only, and the two reconcilers own separate ports.
const DefaultServiceID = "4421"

// NQN returns the subsystem NQN of the drive with stable id id.
func NQN(id string) string { return NQNPrefix + id }

// NamespaceUUID returns the dashed namespace UUID of a drive export,
// derived from the drive id alone (a name-based UUID, RFC 9562 version 8,
// from SHA-256), so it is the same on every export of the drive. The NGUID
// is the same 16 bytes (NamespaceNGUID).
func NamespaceUUID(id string) string {
	u := nsID(id)
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// NamespaceNGUID is NamespaceUUID's 16 bytes as 32 hex digits.
func NamespaceNGUID(id string) string {
	u := nsID(id)
	return hex.EncodeToString(u[:])
}

func nsID(id string) [16]byte {
	sum := sha256.Sum256([]byte("fabraid drive namespace\x00" + id))
	var u [16]byte
	copy(u[:], sum[:16])
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

// Drive is one drive this node has claimed.
type Drive struct {
	ID   string // stable id (internal/drive), unique in the cluster
	Path string // current block device, e.g. /dev/nvme0n1
}

// Host is a host NQN with its DH-HMAC-CHAP secret.
type Host struct {
	NQN string
	// Secret is the host's DH-HMAC-CHAP secret in DHHC-1 form (kernel/nvmf
	// GenerateSecret); empty: none.
	Secret nvmf.SecretText
}

// Volume is one volume as the exporter needs it.
type Volume struct {
	UUID string // for messages and Export.Volume
	// Owner is the node holding the volume's owner key (package
	// cluster/owner), the only node that may run its engine: not the
	// record's desired owner, which may not have acquired the key yet or
	// may have lost it. An empty NQN (no owner key: a failover in
	// progress) exports the members to nobody.
	Owner Host
	// Epoch is the owner key's epoch (its create revision), 0 without a
	// key. Desire does not use it; the caller acknowledges "fenced for
	// Epoch" after a Reconcile of this Input succeeded.
	Epoch   uint64
	Members []string // drive ids of every member, on any node
	// Prepared is a planned move's target while Owner still holds the
	// key: allowed too, so it imports the members ahead (handover.go).
	// Empty: none.
	Prepared Host
	// Released is the host NQN of an old owner that ended its own
	// controllers to the members (handover.go): it loses access without
	// a fence of the drives. Empty: none.
	Released string
}

// Input is the whole desired state of one node's drive exports.
type Input struct {
	// HostNQN is this node's host NQN: members of volumes it owns are not
	// exported (its engine opens them directly).
	HostNQN   string
	Drives    []Drive
	Volumes   []Volume
	Addresses []string // storage addresses, one port each
	ServiceID string   // default DefaultServiceID
	// AllowNoAuth exports to an owner that has no secret although the
	// kernel has DH-HMAC-CHAP. Off by default: such an owner gets nothing.
	AllowNoAuth bool
	// AllowUnauthenticated exports by host NQN alone on a target without
	// DH-HMAC-CHAP (require_auth = false). Off by default: such a target
	// exports nothing (Refusal).
	AllowUnauthenticated bool
	// CtrlSecret is this node's DH-HMAC-CHAP controller secret (DHHC-1
	// form): with DH-HMAC-CHAP, every host entry with a host key gets it
	// as dhchap_ctrl_key, so a host that asks for bidirectional
	// authentication can check this target. Empty: none (the host alone
	// authenticates). The volume exports put the same key on the same
	// host entries (volmgr.ClusterPlan.CtrlSecret).
	CtrlSecret nvmf.SecretText
	// TLS is what the drive ports offer (internal/fabrictls:
	// PortsOptional, PortsRequired, or PortsPlain ""). With TLS each
	// export's pair key (fabrictls.PairKey, from its owner's secret) is
	// in Desired.Keys, and an owner without a secret gets nothing.
	TLS string
	// Rekeys are the announced host key rotations (by host NQN): a volume
	// owner whose Secret is a rotation's New while the target's host entry
	// has its Old gets the new key in place, without a fence (Stale).
	Rekeys Rekeys
}

// Export is one drive export of the desired state.
type Export struct {
	DriveID string
	NQN     string
	Volume  string
	Host    string // the only allowed host
	Auth    bool   // DH-HMAC-CHAP required
	TLS     bool   // the ports take TLS (Input.TLS)
}

// Desired is the outcome of Desire.
type Desired struct {
	Spec    nvmet.Spec
	Exports []Export
	// Problems are drives or volumes left out, with the reason; the rest
	// is exported regardless.
	Problems []error
	// Refused (Refusal) is why nothing at all is exported: Spec is
	// empty, so applying it removes every drive export there was.
	Refused error
	// Keys are the TLS pair keys of Exports (Input.TLS): they must be in
	// the .nvme keyring before a host connects. They print redacted.
	Keys []nvmetls.Derived
}

// ErrConflict is wrapped by Problems about inconsistent input (a drive in
// two volumes, two secrets for one host).
var ErrConflict = errors.New("conflicting input")

// ErrNoSecret is wrapped by the Problem of an owner without a
// DH-HMAC-CHAP secret on a kernel that has nvmet authentication.
var ErrNoSecret = errors.New("owner has no DH-HMAC-CHAP secret")

// ErrNoTLS is Desired.Refused when Input.TLS asks for TLS and the target
// has none: nothing is exported rather than plain ports.
var ErrNoTLS = errors.New("exports refused: TLS asked for (nvme_tls) and the NVMe target cannot take TLS (NVME_TARGET_TCP_TLS, the .nvme keyring)")

// ErrAuthRequired is wrapped by Refusal's reason.
var ErrAuthRequired = errors.New("exports refused: require_auth = true and the NVMe target has no DH-HMAC-CHAP")

// Refusal is why a node whose target has DH-HMAC-CHAP or not (auth)
// exports nothing, drive and volume exports alike: nil when it has it, or
// when allowUnauthenticated (require_auth = false) lets it export by host
// NQN alone. The reason names both fixes. Pure; the daemon decides with
// it once per reconcile for both reconcilers.
func Refusal(auth, allowUnauthenticated bool) error {
	if auth || allowUnauthenticated {
		return nil
	}
	return fmt.Errorf("%w (kernel nvmet without CONFIG_NVME_TARGET_AUTH, e.g. Debian's 6.1, or a target plugin without it): "+
		"this node exports no drives and no volumes rather than allowing hosts by host NQN alone; "+
		"boot a kernel with CONFIG_NVME_TARGET_AUTH=y, or set require_auth = false to export unauthenticated", ErrAuthRequired)
}

// Desire computes the nvmet configuration for in on a kernel with the
// features f (f.Auth, and f.TLS when in.TLS is set); see the package
// documentation. It is pure and deterministic.
func Desire(in Input, f nvmet.Features) Desired {
	var d Desired
	if d.Refused = Refusal(f.Auth, in.AllowUnauthenticated); d.Refused != nil {
		return d
	}
	if in.TLS != fabrictls.PortsPlain && !f.TLS {
		d.Refused = ErrNoTLS
		return d
	}
	problem := func(format string, a ...any) { d.Problems = append(d.Problems, fmt.Errorf(format, a...)) }
	svc := in.ServiceID
	if svc == "" {
		svc = DefaultServiceID
	}
	if len(in.Addresses) > MaxAddresses {
		problem("%d storage addresses, at most %d exported", len(in.Addresses), MaxAddresses)
		in.Addresses = in.Addresses[:MaxAddresses]
	}
	local := map[string]Drive{}
	for _, dr := range in.Drives {
		local[dr.ID] = dr
	}
	// Which volume each local drive serves; a drive in two is refused.
	volOf := map[string]*Volume{}
	twice := map[string]bool{}
	for i := range in.Volumes {
		v := &in.Volumes[i]
		for _, id := range v.Members {
			if _, ok := local[id]; !ok {
				continue
			}
			if prev := volOf[id]; prev != nil && prev.UUID != v.UUID {
				if !twice[id] {
					problem("drive %s: member of volumes %s and %s: %w; not exported", id, prev.UUID, v.UUID, ErrConflict)
				}
				twice[id] = true
			}
			volOf[id] = v
		}
	}
	secrets := map[string]nvmf.SecretText{}
	badHost := map[string]bool{}
	for _, v := range in.Volumes {
		h := v.Owner
		if prev, ok := secrets[h.NQN]; ok && prev != h.Secret && !badHost[h.NQN] {
			problem("host %s: two different DH-HMAC-CHAP secrets: %w; not exported to", h.NQN, ErrConflict)
			badHost[h.NQN] = true
		}
		secrets[h.NQN] = h.Secret
	}
	ids := make([]string, 0, len(volOf))
	for id := range volOf {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	hosts := map[string]bool{}
	var subs []string
	for _, id := range ids {
		v := volOf[id]
		h := v.Owner
		switch {
		case twice[id] || badHost[h.NQN]:
			continue
		case h.NQN == in.HostNQN:
			continue // owned here: opened directly
		case h.NQN == "":
			continue // no owner (failover in progress): fenced from everyone
		case f.Auth && h.Secret == "" && !in.AllowNoAuth:
			problem("drive %s of volume %s: owner %s: %w (the kernel has DH-HMAC-CHAP); not exported", id, v.UUID, h.NQN, ErrNoSecret)
			continue
		}
		sub := nvmet.Subsystem{
			NQN: NQN(id), Serial: NamespaceNGUID(id)[:20], Model: "fabraid drive",
			AllowedHosts: []string{h.NQN},
			Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: local[id].Path,
				UUID: NamespaceUUID(id), NGUID: NamespaceNGUID(id)}},
		}
		if err := (nvmet.Spec{Hosts: []nvmet.Host{{NQN: h.NQN}}, Subsystems: []nvmet.Subsystem{sub}}).Validate(nvmet.DriveOwnership()); err != nil {
			problem("drive %s of volume %s: %w; not exported", id, v.UUID, err)
			continue
		}
		if in.TLS != fabrictls.PortsPlain {
			k, err := fabrictls.PairKey(h.Secret, h.NQN, sub.NQN)
			if err != nil {
				problem("drive %s of volume %s: %w; not exported", id, v.UUID, err)
				continue
			}
			d.Keys = append(d.Keys, k)
		}
		if !hosts[h.NQN] {
			hosts[h.NQN] = true
			host := nvmet.Host{NQN: h.NQN}
			if f.Auth {
				host.DHCHAPKey = h.Secret.Reveal()
				if h.Secret != "" {
					host.DHCHAPCtrlKey = in.CtrlSecret.Reveal()
				}
			}
			d.Spec.Hosts = append(d.Spec.Hosts, host)
		}
		d.Spec.Subsystems = append(d.Spec.Subsystems, sub)
		d.Exports = append(d.Exports, Export{DriveID: id, NQN: sub.NQN, Volume: v.UUID, Host: h.NQN, Auth: f.Auth && h.Secret != "", TLS: in.TLS != fabrictls.PortsPlain})
		subs = append(subs, sub.NQN)
	}
	if len(subs) > 0 {
		for i, a := range in.Addresses {
			d.Spec.Ports = append(d.Spec.Ports, nvmet.Port{ID: uint16(PortBase + i), Transport: nvmet.TCP,
				Address: a, ServiceID: svc, Subsystems: slices.Clone(subs),
				TLS: in.TLS != fabrictls.PortsPlain, TLSOptional: in.TLS == fabrictls.PortsOptional})
		}
	}
	if err := d.Spec.Validate(nvmet.DriveOwnership()); err != nil {
		// Only port-level input is left to be wrong (addresses, service id).
		d.Problems = append(d.Problems, fmt.Errorf("storage ports %s:%s: %w; nothing exported", strings.Join(in.Addresses, ","), svc, err))
		d.Spec, d.Exports, d.Keys = nvmet.Spec{}, nil, nil
	}
	return d
}

// Fence returns the spec to apply before desired so that no controller of
// a host that loses access survives, and nothing new is reachable before
// that: stale (see Stale; rekeys are the announced host key rotations)
// drive subsystems are unlinked from every port,
// and the step links no subsystem that actual does not link already on
// that port (new exports wait for the second step). fenced lists the
// stale drive ids; when it is empty, step is desired and there is nothing
// to fence. Pure.
func Fence(desired nvmet.Spec, actual nvmet.State, rekeys Rekeys) (step nvmet.Spec, fenced []string) {
	cut := Stale(desired, actual, rekeys)
	if len(cut) == 0 {
		return desired, nil
	}
	linked := map[uint16]map[string]bool{}
	for _, p := range actual.Ports {
		linked[p.ID] = map[string]bool{}
		for _, n := range p.Subsystems {
			linked[p.ID][n] = true
		}
	}
	step = desired
	step.Ports = nil
	for _, p := range desired.Ports {
		p.Subsystems = slices.DeleteFunc(slices.Clone(p.Subsystems), func(n string) bool { return cut[n] || !linked[p.ID][n] })
		step.Ports = append(step.Ports, p)
	}
	for n := range cut {
		fenced = append(fenced, strings.TrimPrefix(n, NQNPrefix))
	}
	slices.Sort(fenced)
	return step, fenced
}

// Stale returns the drive subsystems (NQNPrefix) that actual links on a
// port although desired does not export them, or that allow a host
// desired does not allow for them, or a host whose DH-HMAC-CHAP key
// changes other than by an announced rotation in rekeys (KeyChangeFences):
// the exports whose hosts may hold controllers they must not keep. Empty
// when actual serves only what desired allows. Pure.
func Stale(desired nvmet.Spec, actual nvmet.State, rekeys Rekeys) map[string]bool {
	want := map[string]map[string]bool{}
	for _, s := range desired.Subsystems {
		want[s.NQN] = map[string]bool{}
		for _, h := range s.AllowedHosts {
			want[s.NQN][h] = true
		}
	}
	wantKey := map[string]string{}
	for _, h := range desired.Hosts {
		wantKey[h.NQN] = h.DHCHAPKey
	}
	haveKey := map[string]string{}
	for _, h := range actual.Hosts {
		haveKey[h.NQN] = h.DHCHAPKey
	}
	linked := map[string]bool{}
	for _, p := range actual.Ports {
		for _, n := range p.Subsystems {
			linked[n] = true
		}
	}
	cut := map[string]bool{}
	for _, s := range actual.Subsystems {
		if !linked[s.NQN] || !strings.HasPrefix(s.NQN, NQNPrefix) {
			continue
		}
		w, ok := want[s.NQN]
		if !ok || s.AllowAnyHost {
			cut[s.NQN] = true
			continue
		}
		for _, h := range s.AllowedHosts {
			r, ok := rekeys[h]
			if !w[h] || KeyChangeFences(haveKey[h], wantKey[h], r, ok) {
				cut[s.NQN] = true
			}
		}
	}
	return cut
}
