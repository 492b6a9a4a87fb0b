package nvmet

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/kernel/internal/nvmesys"
)

// Spec is the desired (or, from Read, the actual) nvmet configuration.
// Order of slices does not matter; names must be unique.
type Spec struct {
	Subsystems []Subsystem
	Ports      []Port
	Hosts      []Host
}

// Subsystem is one NVMe subsystem, configfs subsystems/<NQN>.
type Subsystem struct {
	NQN string
	// Serial, Model and Firmware are reported in Identify Controller. The
	// kernel accepts them only until the first host has connected
	// ("subsys_discovered"); set them at creation. Empty means the kernel's
	// default. Firmware needs attr_firmware (Linux 6.2); it is dropped
	// silently on older kernels, being cosmetic.
	Serial   string
	Model    string
	Firmware string
	// CntlIDMin and CntlIDMax bound the controller ids the subsystem hands
	// out (attr_cntlid_min, attr_cntlid_max); 0 and 0 keep the kernel's
	// 1..0xffef. A Linux host refuses a second controller of one subsystem
	// NQN with a controller id it already has ("Duplicate cntlid ...,
	// rejecting"), so nodes that export the same NQN (a volume's old and
	// new owner) must hand out disjoint ranges. Set both or neither.
	CntlIDMin uint16
	CntlIDMax uint16
	// AllowedHosts lists host NQNs allowed to connect (allowed_hosts/
	// symlinks into hosts/). Each must be in Spec.Hosts.
	AllowedHosts []string
	Namespaces   []Namespace

	// AllowAnyHost is read back from attr_allow_any_host. Apply always
	// writes 0: fabraid never exports to any host. Validate rejects a
	// desired Spec that sets it.
	AllowAnyHost bool
}

// Namespace is subsystems/<NQN>/namespaces/<NSID>.
type Namespace struct {
	NSID       uint32
	DevicePath string // block device (or file) to export
	// UUID and NGUID identify the namespace to hosts; native multipath
	// groups paths by them, so every node exporting a volume must use the
	// same values. Empty: whatever the kernel has (a random UUID, a zero
	// NGUID). Dashed or plain hex; compared case-insensitively.
	UUID  string
	NGUID string
	// ANAGroup is the ANA group id (1..128); 0 means the default group 1.
	ANAGroup uint32
	// Disabled keeps the namespace configured but not enabled.
	Disabled bool
}

// Transport names accepted by addr_trtype.
type Transport string

const (
	TCP  Transport = "tcp"
	RDMA Transport = "rdma"
	FC   Transport = "fc"
	Loop Transport = "loop"
)

// ANAState is an ANA group state as spelled in configfs.
type ANAState string

const (
	Optimized      ANAState = "optimized"
	NonOptimized   ANAState = "non-optimized"
	Inaccessible   ANAState = "inaccessible"
	PersistentLoss ANAState = "persistent-loss"
	Change         ANAState = "change"
)

func (s ANAState) valid() bool {
	switch s {
	case Optimized, NonOptimized, Inaccessible, PersistentLoss, Change:
		return true
	}
	return false
}

// Port is ports/<ID>.
type Port struct {
	ID        uint16
	Transport Transport
	// Family is the address family ("ipv4", "ipv6", "ib", "fc"); empty
	// derives it from Address for tcp and rdma.
	Family    string
	Address   string // addr_traddr; empty for loop
	ServiceID string // addr_trsvcid, e.g. "4420"; empty for loop
	// TLS requires TLS 1.3 on a tcp port (addr_tsas "tls1.3", addr_treq
	// "required"). Needs addr_tsas (Linux 6.7) with NVME_TARGET_TCP_TLS,
	// the kernel's .nvme keyring (module nvme_keyring, loaded before the
	// port is made) holding the hosts' PSKs (kernel/nvmetls), and tlshd.
	TLS bool
	// TLSOptional (with TLS) sets addr_treq "not required": the port
	// also accepts connections without TLS, a step while hosts move to
	// TLS. Read reports it for TLS ports.
	TLSOptional bool
	// Subsystems lists the NQNs linked on this port; each must be in
	// Spec.Subsystems. Unlinking a subsystem tears its controllers down on
	// this port.
	Subsystems []string
	// ANAStates sets the state of ANA groups on this port. Group 1 always
	// exists (initially optimized); other listed groups are created
	// (initially inaccessible). Groups not listed keep their state; groups
	// >1 present in configfs but not listed are removed.
	ANAStates map[uint32]ANAState

	// Referrals are read back only (names under referrals/); Apply never
	// creates them and removes them only with the port.
	Referrals []string
}

// Host is hosts/<NQN>: a host NQN that subsystems can allow, with its
// optional DH-HMAC-CHAP settings (Linux 6.0, NVME_TARGET_AUTH).
type Host struct {
	NQN string
	// DHCHAPKey is the host's secret in "DHHC-1:xx:<base64>:" form (see
	// kernel/nvmf GenerateSecret); DHCHAPCtrlKey, when set, makes
	// authentication bidirectional. Empty: no authentication.
	DHCHAPKey     string
	DHCHAPCtrlKey string
	// DHCHAPHash is "hmac(sha256)", "hmac(sha384)" or "hmac(sha512)";
	// empty keeps the kernel default (hmac(sha256)).
	DHCHAPHash string
	// DHCHAPDHGroup is "null", "ffdhe2048", ... ; empty keeps the default.
	DHCHAPDHGroup string
}

// Validate checks a desired Spec against the rules of configfs and of
// fabraid: valid unique NQNs, referenced hosts and subsystems present, no
// allow-any-host, sane namespaces, ports and ANA states, every object owned
// according to own.
func (s Spec) Validate(own Ownership) error {
	hosts := map[string]bool{}
	for _, h := range s.Hosts {
		if err := nvmesys.ValidateNQN(h.NQN); err != nil {
			return fmt.Errorf("host: %w", err)
		}
		if hosts[h.NQN] {
			return fmt.Errorf("host %s: listed twice", h.NQN)
		}
		hosts[h.NQN] = true
		for _, k := range []string{h.DHCHAPKey, h.DHCHAPCtrlKey} {
			if k != "" && (!strings.HasPrefix(k, "DHHC-1:") || len(k) < 11 || strings.ContainsAny(k, "\n ,")) {
				return fmt.Errorf("host %s: DH-HMAC-CHAP key is not in DHHC-1:xx:<base64>: form", h.NQN)
			}
		}
		if h.DHCHAPCtrlKey != "" && h.DHCHAPKey == "" {
			return fmt.Errorf("host %s: a controller key needs a host key", h.NQN)
		}
	}
	subs := map[string]bool{}
	for _, sub := range s.Subsystems {
		if err := nvmesys.ValidateNQN(sub.NQN); err != nil {
			return fmt.Errorf("subsystem: %w", err)
		}
		if sub.NQN == nvmesys.DiscoveryNQN {
			return fmt.Errorf("subsystem %s: the discovery NQN cannot be exported", sub.NQN)
		}
		if !own.ownsSubsystem(sub.NQN) {
			return fmt.Errorf("subsystem %s: not owned by fabraid (%s)", sub.NQN, own)
		}
		if subs[sub.NQN] {
			return fmt.Errorf("subsystem %s: listed twice", sub.NQN)
		}
		subs[sub.NQN] = true
		if sub.AllowAnyHost {
			return fmt.Errorf("subsystem %s: allow any host is never used by fabraid; list the hosts", sub.NQN)
		}
		if strings.TrimSpace(sub.Serial) != sub.Serial || strings.TrimSpace(sub.Model) != sub.Model {
			return fmt.Errorf("subsystem %s: serial and model take no leading or trailing spaces (the kernel pads them)", sub.NQN)
		}
		if len(sub.Serial) > 20 || !printable(sub.Serial) {
			return fmt.Errorf("subsystem %s: serial %q: at most 20 printable ASCII characters", sub.NQN, sub.Serial)
		}
		if len(sub.Model) > 40 || !printable(sub.Model) {
			return fmt.Errorf("subsystem %s: model %q: at most 40 printable ASCII characters", sub.NQN, sub.Model)
		}
		if len(sub.Firmware) > 8 || !printable(sub.Firmware) {
			return fmt.Errorf("subsystem %s: firmware %q: at most 8 printable ASCII characters", sub.NQN, sub.Firmware)
		}
		if (sub.CntlIDMin == 0) != (sub.CntlIDMax == 0) || sub.CntlIDMin > sub.CntlIDMax || sub.CntlIDMax > MaxCntlID {
			return fmt.Errorf("subsystem %s: controller id range %d..%d: want 1 <= min <= max <= %d, or both 0", sub.NQN, sub.CntlIDMin, sub.CntlIDMax, MaxCntlID)
		}
		allowed := map[string]bool{}
		for _, h := range sub.AllowedHosts {
			if !hosts[h] {
				return fmt.Errorf("subsystem %s: allowed host %s is not in the host list", sub.NQN, h)
			}
			if allowed[h] {
				return fmt.Errorf("subsystem %s: allowed host %s listed twice", sub.NQN, h)
			}
			allowed[h] = true
		}
		nsids := map[uint32]bool{}
		for _, ns := range sub.Namespaces {
			if ns.NSID == 0 || ns.NSID == 0xffffffff {
				return fmt.Errorf("subsystem %s: namespace id %#x is reserved", sub.NQN, ns.NSID)
			}
			if nsids[ns.NSID] {
				return fmt.Errorf("subsystem %s: namespace %d listed twice", sub.NQN, ns.NSID)
			}
			nsids[ns.NSID] = true
			if !strings.HasPrefix(ns.DevicePath, "/") || strings.ContainsAny(ns.DevicePath, "\n") {
				return fmt.Errorf("subsystem %s namespace %d: device path %q is not absolute", sub.NQN, ns.NSID, ns.DevicePath)
			}
			for _, id := range []string{ns.UUID, ns.NGUID} {
				if id == "" {
					continue
				}
				if _, err := nvmesys.ParseUUID(id); err != nil {
					return fmt.Errorf("subsystem %s namespace %d: %w", sub.NQN, ns.NSID, err)
				}
			}
			if ns.ANAGroup > maxANAGroup {
				return fmt.Errorf("subsystem %s namespace %d: ANA group %d out of range 1..%d", sub.NQN, ns.NSID, ns.ANAGroup, maxANAGroup)
			}
		}
	}
	ports := map[uint16]bool{}
	for _, p := range s.Ports {
		if !own.ownsPort(p.ID) {
			return fmt.Errorf("port %d: not owned by fabraid (%s)", p.ID, own)
		}
		if ports[p.ID] {
			return fmt.Errorf("port %d: listed twice", p.ID)
		}
		ports[p.ID] = true
		switch p.Transport {
		case TCP, RDMA:
			a, err := netip.ParseAddr(p.Address)
			if err != nil {
				return fmt.Errorf("port %d: address %q: %w", p.ID, p.Address, err)
			}
			if p.Family != "" && p.Family != familyOf(a) {
				return fmt.Errorf("port %d: family %q does not match address %s", p.ID, p.Family, p.Address)
			}
			if p.ServiceID == "" || len(p.ServiceID) >= nvmesys.TrsvcidSize || !digits(p.ServiceID) {
				return fmt.Errorf("port %d: service id %q: want a port number", p.ID, p.ServiceID)
			}
		case FC:
			if p.Address == "" {
				return fmt.Errorf("port %d: fc needs an address", p.ID)
			}
		case Loop:
			if p.Address != "" || p.ServiceID != "" || p.Family != "" {
				return fmt.Errorf("port %d: loop ports take no address", p.ID)
			}
		default:
			return fmt.Errorf("port %d: unknown transport %q", p.ID, p.Transport)
		}
		if p.TLS && p.Transport != TCP {
			return fmt.Errorf("port %d: TLS needs the tcp transport", p.ID)
		}
		if p.TLSOptional && !p.TLS {
			return fmt.Errorf("port %d: TLS optional needs TLS", p.ID)
		}
		linked := map[string]bool{}
		for _, nqn := range p.Subsystems {
			if !subs[nqn] {
				return fmt.Errorf("port %d: subsystem %s is not in the subsystem list", p.ID, nqn)
			}
			if linked[nqn] {
				return fmt.Errorf("port %d: subsystem %s listed twice", p.ID, nqn)
			}
			linked[nqn] = true
		}
		for g, st := range p.ANAStates {
			if g < 1 || g > maxANAGroup {
				return fmt.Errorf("port %d: ANA group %d out of range 1..%d", p.ID, g, maxANAGroup)
			}
			if !st.valid() {
				return fmt.Errorf("port %d: ANA group %d: unknown state %q", p.ID, g, st)
			}
		}
		if len(p.Referrals) > 0 {
			return fmt.Errorf("port %d: referrals are read-only", p.ID)
		}
	}
	return nil
}

// MaxCntlID is the highest controller id nvmet hands out (NVME_CNTLID_MAX)
// and the kernel's default attr_cntlid_max.
const MaxCntlID = 0xffef

// maxANAGroup is NVMET_MAX_ANAGRPS.
const maxANAGroup = 128

func familyOf(a netip.Addr) string {
	if a.Is4() || a.Is4In6() {
		return "ipv4"
	}
	return "ipv6"
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// family returns the address family to write for p.
func (p Port) family() string {
	if p.Family != "" {
		return p.Family
	}
	switch p.Transport {
	case TCP, RDMA:
		if a, err := netip.ParseAddr(p.Address); err == nil {
			return familyOf(a)
		}
	case Loop:
		return "" // left as created
	}
	return ""
}

// sortSpec returns a copy of s with every list sorted, so plans and
// comparisons are deterministic.
func sortSpec(s Spec) Spec {
	out := Spec{
		Subsystems: slices.Clone(s.Subsystems),
		Ports:      slices.Clone(s.Ports),
		Hosts:      slices.Clone(s.Hosts),
	}
	slices.SortFunc(out.Hosts, func(a, b Host) int { return strings.Compare(a.NQN, b.NQN) })
	slices.SortFunc(out.Subsystems, func(a, b Subsystem) int { return strings.Compare(a.NQN, b.NQN) })
	for i := range out.Subsystems {
		sub := &out.Subsystems[i]
		sub.AllowedHosts = slices.Sorted(slices.Values(sub.AllowedHosts))
		sub.Namespaces = slices.Clone(sub.Namespaces)
		slices.SortFunc(sub.Namespaces, func(a, b Namespace) int { return cmpU32(a.NSID, b.NSID) })
	}
	slices.SortFunc(out.Ports, func(a, b Port) int { return int(a.ID) - int(b.ID) })
	for i := range out.Ports {
		out.Ports[i].Subsystems = slices.Sorted(slices.Values(out.Ports[i].Subsystems))
		out.Ports[i].Referrals = slices.Sorted(slices.Values(out.Ports[i].Referrals))
	}
	return out
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
