package nvmf

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"github.com/fabraid/fabraid/kernel/internal/nvmesys"
)

// Transport is an NVMe-oF transport name as the kernel spells it.
type Transport string

const (
	TCP  Transport = "tcp"
	RDMA Transport = "rdma"
	FC   Transport = "fc"
	Loop Transport = "loop"
)

// DiscoveryNQN is the well-known NQN of discovery controllers.
const DiscoveryNQN = nvmesys.DiscoveryNQN

// Well-known TCP service ids (NVMe/TCP transport spec 7.4.9).
const (
	DefaultIOPort        = "4420"
	DefaultDiscoveryPort = "8009"
)

// ErrInvalidOptions is wrapped by every validation error of Options.
var ErrInvalidOptions = errors.New("invalid connect options")

// Options describes one controller to create through /dev/nvme-fabrics.
// String renders the option string the kernel parses
// (drivers/nvme/host/fabrics.c nvmf_parse_options); Validate checks it
// first, so the kernel never sees a malformed string.
type Options struct {
	Transport Transport
	Address   string // traddr: IP address (tcp, rdma), nn-0x..:pn-0x.. (fc); empty for loop
	ServiceID string // trsvcid: TCP/RDMA port; empty for fc and loop
	NQN       string // subsystem NQN; DiscoveryNQN (or empty with Discovery) for discovery

	// HostNQN and HostID identify this host; they must be the same for
	// every connection of the host (see LoadHostIdentity), else the kernel
	// refuses with "found same hostid but different hostnqn".
	HostNQN string
	HostID  string

	HostAddress string // host_traddr: source address
	HostIface   string // host_iface: source interface (tcp)

	QueueSize   int // 16..1024; 0 = kernel default (128)
	IOQueues    int // nr_io_queues; 0 = one per CPU
	WriteQueues int // nr_write_queues; 0 = none
	PollQueues  int // nr_poll_queues; 0 = none

	// Timeouts, when non-nil, sets all four timeouts explicitly; nil keeps
	// the kernel defaults (which leave a dead member undetected for
	// minutes). Use a Profile.
	Timeouts *Timeouts

	DuplicateConnect bool // allow a second controller to the same subsystem and address
	HeaderDigest     bool
	DataDigest       bool

	// DHCHAPSecret is this host's DH-HMAC-CHAP secret ("DHHC-1:..");
	// DHCHAPCtrlSecret, when set, also authenticates the controller.
	DHCHAPSecret     string
	DHCHAPCtrlSecret string

	// TLS asks for TLS 1.3 with a PSK (NVME_TCP_TLS; tlshd runs the
	// handshake). The kernel looks the PSK up by its identity (see
	// kernel/nvmetls) in Keyring, or uses TLSKey.
	TLS bool
	// Keyring (keyring=) is the serial of the keyring searched for the
	// PSK and handed to tlshd; 0 is the kernel's .nvme keyring.
	Keyring int
	// TLSKey (tls_key=) is the serial of the PSK to use instead of the
	// one found by identity; 0 looks it up.
	TLSKey    int
	Discovery bool // persistent discovery controller semantics ("discovery")
}

// Timeouts are the controller-loss knobs of one connection, in seconds.
type Timeouts struct {
	// KeepAlive (keep_alive_tmo): the controller is considered lost when
	// a keep-alive gets no answer within it. >= 1.
	KeepAlive int
	// ReconnectDelay (reconnect_delay): pause between reconnect attempts. >= 1.
	ReconnectDelay int
	// CtrlLoss (ctrl_loss_tmo): give up reconnecting and delete the
	// controller after this long; -1 = reconnect forever.
	CtrlLoss int
	// FastIOFail (fast_io_fail_tmo): fail queued and new I/O this long
	// after the loss instead of holding it until CtrlLoss; -1 = hold.
	FastIOFail int
}

// Forever is the value of CtrlLoss (reconnect forever) and FastIOFail
// (never fail I/O early) that disables the timeout.
const Forever = -1

// Timeout profiles; see Profile.
const (
	// ProfileMember is for RAID members: a dead member must surface as
	// I/O errors within seconds so the engine goes degraded. Keep-alive
	// 2 s detects a silent peer, fast_io_fail 0 fails I/O as soon as the
	// controller starts reconnecting; reconnect every 2 s for a minute,
	// then the controller is deleted and the importer reconnects it when
	// the drive's node is back.
	ProfileMember = "member"
	// ProfileVolumePath is for paths to an exported volume: I/O must be
	// queued through an owner failover (native multipath holds it while
	// any path is reconnecting) rather than fail. Reconnect every 2 s,
	// forever; the importer deletes paths to old owners once a new path
	// is live.
	ProfileVolumePath = "volume-path"
	// ProfileKernelDefault states the kernel's defaults explicitly.
	ProfileKernelDefault = "kernel-default"
)

// Profile returns the Timeouts of a named profile.
func Profile(name string) (Timeouts, error) {
	switch name {
	case ProfileMember:
		return Timeouts{KeepAlive: 2, ReconnectDelay: 2, CtrlLoss: 60, FastIOFail: 0}, nil
	case ProfileVolumePath:
		return Timeouts{KeepAlive: 5, ReconnectDelay: 2, CtrlLoss: Forever, FastIOFail: Forever}, nil
	case ProfileKernelDefault:
		return Timeouts{KeepAlive: 5, ReconnectDelay: 10, CtrlLoss: 600, FastIOFail: Forever}, nil
	}
	return Timeouts{}, fmt.Errorf("unknown timeout profile %q (want %s or %s)", name, ProfileMember, ProfileVolumePath)
}

// Limits enforced by Validate. The kernel accepts more; these bound
// mistakes (an hour-long keep-alive is a typo, not a policy).
const (
	maxTimeout   = 3600
	maxCtrlLoss  = 7 * 24 * 3600
	minQueueSize = 16
	maxQueueSize = 1024
)

// Validate checks the timeouts for range and consistency.
func (t Timeouts) Validate() error {
	switch {
	case t.KeepAlive < 1 || t.KeepAlive > maxTimeout:
		return fmt.Errorf("%w: keep_alive_tmo %d out of range 1..%d", ErrInvalidOptions, t.KeepAlive, maxTimeout)
	case t.ReconnectDelay < 1 || t.ReconnectDelay > maxTimeout:
		return fmt.Errorf("%w: reconnect_delay %d out of range 1..%d", ErrInvalidOptions, t.ReconnectDelay, maxTimeout)
	case t.CtrlLoss < Forever || t.CtrlLoss > maxCtrlLoss:
		return fmt.Errorf("%w: ctrl_loss_tmo %d out of range -1..%d", ErrInvalidOptions, t.CtrlLoss, maxCtrlLoss)
	case t.FastIOFail < Forever || t.FastIOFail > maxCtrlLoss:
		return fmt.Errorf("%w: fast_io_fail_tmo %d out of range -1..%d", ErrInvalidOptions, t.FastIOFail, maxCtrlLoss)
	case t.CtrlLoss >= 0 && t.FastIOFail > t.CtrlLoss:
		return fmt.Errorf("%w: fast_io_fail_tmo %d exceeds ctrl_loss_tmo %d: I/O would never fail fast", ErrInvalidOptions, t.FastIOFail, t.CtrlLoss)
	}
	return nil
}

// Validate checks o: known transport, addresses that fit it, valid NQNs and
// host id, option values within the kernel's ranges, well-formed secrets,
// and nothing that could inject another option (no ',' or newline).
func (o Options) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, a...)...)
	}
	switch o.Transport {
	case TCP, RDMA:
		if _, err := netip.ParseAddr(o.Address); err != nil {
			return bad("traddr %q is not an IP address", o.Address)
		}
		if n, err := strconv.Atoi(o.ServiceID); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != o.ServiceID {
			return bad("trsvcid %q is not a port number", o.ServiceID)
		}
	case FC:
		if o.Address == "" || !safe(o.Address) || len(o.Address) >= nvmesys.TraddrSize {
			return bad("fc traddr %q", o.Address)
		}
		if o.ServiceID != "" {
			return bad("fc takes no trsvcid")
		}
	case Loop:
		if o.Address != "" || o.ServiceID != "" {
			return bad("loop takes no traddr or trsvcid")
		}
	case "":
		return bad("no transport")
	default:
		return bad("unknown transport %q (want tcp, rdma, fc or loop)", o.Transport)
	}
	nqn := o.NQN
	if nqn == "" && o.Discovery {
		nqn = DiscoveryNQN
	}
	if err := nvmesys.ValidateNQN(nqn); err != nil {
		return fmt.Errorf("%w: subsystem %w", ErrInvalidOptions, err)
	}
	if err := nvmesys.ValidateNQN(o.HostNQN); err != nil {
		return fmt.Errorf("%w: hostnqn %w (see LoadHostIdentity)", ErrInvalidOptions, err)
	}
	if _, err := nvmesys.ParseUUID(o.HostID); err != nil || len(o.HostID) != 36 {
		return bad("hostid %q is not a dashed UUID", o.HostID)
	}
	if o.HostAddress != "" {
		if _, err := netip.ParseAddr(o.HostAddress); err != nil && o.Transport != FC {
			return bad("host_traddr %q is not an IP address", o.HostAddress)
		}
		if !safe(o.HostAddress) {
			return bad("host_traddr %q", o.HostAddress)
		}
	}
	if o.HostIface != "" {
		if len(o.HostIface) > 15 || !safe(o.HostIface) || strings.ContainsAny(o.HostIface, "/:") {
			return bad("host_iface %q is not an interface name", o.HostIface)
		}
		if o.Transport != TCP {
			return bad("host_iface needs the tcp transport")
		}
	}
	if o.QueueSize != 0 && (o.QueueSize < minQueueSize || o.QueueSize > maxQueueSize) {
		return bad("queue_size %d out of range %d..%d", o.QueueSize, minQueueSize, maxQueueSize)
	}
	for _, q := range []struct {
		name string
		v    int
	}{{"nr_io_queues", o.IOQueues}, {"nr_write_queues", o.WriteQueues}, {"nr_poll_queues", o.PollQueues}} {
		if q.v < 0 || q.v > 1024 {
			return bad("%s %d out of range 0..1024", q.name, q.v)
		}
	}
	if o.Timeouts != nil {
		if err := o.Timeouts.Validate(); err != nil {
			return err
		}
	}
	if o.DHCHAPSecret != "" {
		if _, err := ParseSecret(o.DHCHAPSecret); err != nil {
			return fmt.Errorf("%w: dhchap_secret: %w", ErrInvalidOptions, err)
		}
	}
	if o.DHCHAPCtrlSecret != "" {
		if o.DHCHAPSecret == "" {
			return bad("dhchap_ctrl_secret needs dhchap_secret")
		}
		if _, err := ParseSecret(o.DHCHAPCtrlSecret); err != nil {
			return fmt.Errorf("%w: dhchap_ctrl_secret: %w", ErrInvalidOptions, err)
		}
	}
	if o.TLS && o.Transport != TCP {
		return bad("tls needs the tcp transport")
	}
	if o.Keyring < 0 || o.TLSKey < 0 {
		return bad("keyring %d, tls_key %d: serials are positive", o.Keyring, o.TLSKey)
	}
	if (o.Keyring != 0 || o.TLSKey != 0) && !o.TLS {
		return bad("keyring and tls_key need tls")
	}
	return nil
}

// safe reports whether s can sit inside an option string value.
func safe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' || s[i] == ',' || s[i] == '=' {
			return false
		}
	}
	return true
}

// Reveal renders the option string for /dev/nvme-fabrics, DH-HMAC-CHAP
// secrets in clear: for the kernel only, never for a log or an error. It
// does not validate: call Validate (Connect does).
func (o Options) Reveal() string { return o.render(false) }

// Redacted is Reveal with DH-HMAC-CHAP secrets replaced by "<secret>".
func (o Options) Redacted() string { return o.render(true) }

// String is Redacted: fmt's %v and %s never print a secret.
func (o Options) String() string { return o.Redacted() }

// GoString is Redacted too (%#v).
func (o Options) GoString() string { return "nvmf.Options{" + o.Redacted() + "}" }

// LogValue keeps the secrets out of slog output.
func (o Options) LogValue() slog.Value { return slog.StringValue(o.Redacted()) }

func (o Options) render(redact bool) string {
	var b strings.Builder
	kv := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		if v != "" {
			b.WriteByte('=')
			b.WriteString(v)
		}
	}
	num := func(k string, v int) { kv(k, strconv.Itoa(v)) }
	kv("transport", string(o.Transport))
	if o.Address != "" {
		kv("traddr", o.Address)
	}
	if o.ServiceID != "" {
		kv("trsvcid", o.ServiceID)
	}
	nqn := o.NQN
	if nqn == "" && o.Discovery {
		nqn = DiscoveryNQN
	}
	for _, f := range [][2]string{{"nqn", nqn}, {"hostnqn", o.HostNQN}, {"hostid", o.HostID}} {
		if f[1] != "" {
			kv(f[0], f[1])
		}
	}
	if o.HostAddress != "" {
		kv("host_traddr", o.HostAddress)
	}
	if o.HostIface != "" {
		kv("host_iface", o.HostIface)
	}
	if o.QueueSize != 0 {
		num("queue_size", o.QueueSize)
	}
	if o.IOQueues != 0 {
		num("nr_io_queues", o.IOQueues)
	}
	if o.WriteQueues != 0 {
		num("nr_write_queues", o.WriteQueues)
	}
	if o.PollQueues != 0 {
		num("nr_poll_queues", o.PollQueues)
	}
	if t := o.Timeouts; t != nil {
		num("keep_alive_tmo", t.KeepAlive)
		num("reconnect_delay", t.ReconnectDelay)
		num("ctrl_loss_tmo", t.CtrlLoss)
		num("fast_io_fail_tmo", t.FastIOFail)
	}
	if o.DuplicateConnect {
		kv("duplicate_connect", "")
	}
	if o.HeaderDigest {
		kv("hdr_digest", "")
	}
	if o.DataDigest {
		kv("data_digest", "")
	}
	secret := func(k, v string) {
		if v == "" {
			return
		}
		if redact {
			v = "<secret>"
		}
		kv(k, v)
	}
	secret("dhchap_secret", o.DHCHAPSecret)
	secret("dhchap_ctrl_secret", o.DHCHAPCtrlSecret)
	if o.Keyring != 0 {
		num("keyring", o.Keyring)
	}
	if o.TLSKey != 0 {
		num("tls_key", o.TLSKey)
	}
	if o.TLS {
		kv("tls", "")
	}
	if o.Discovery {
		kv("discovery", "")
	}
	return b.String()
}

// ParseOptions parses an option string as String renders it (the subset
// of nvmf_parse_options fabraid uses). Unknown or repeated options and
// malformed numbers are errors; the result is not validated.
func ParseOptions(s string) (Options, error) {
	var o Options
	seen := map[string]bool{}
	var t Timeouts
	nt := 0
	for _, f := range strings.Split(s, ",") {
		k, v, hasV := strings.Cut(f, "=")
		if seen[k] {
			return o, fmt.Errorf("%w: option %q repeated", ErrInvalidOptions, k)
		}
		seen[k] = true
		flag := func(p *bool) error {
			if hasV {
				return fmt.Errorf("%w: option %q takes no value", ErrInvalidOptions, k)
			}
			*p = true
			return nil
		}
		str := func(p *string) error {
			if !hasV || v == "" {
				return fmt.Errorf("%w: option %q needs a value", ErrInvalidOptions, k)
			}
			*p = v
			return nil
		}
		num := func(p *int) error {
			n, err := strconv.Atoi(v)
			if !hasV || err != nil || strconv.Itoa(n) != v {
				return fmt.Errorf("%w: option %q needs an integer, got %q", ErrInvalidOptions, k, v)
			}
			*p = n
			return nil
		}
		var err error
		var tr string
		switch k {
		case "transport":
			err = str(&tr)
			o.Transport = Transport(tr)
		case "traddr":
			err = str(&o.Address)
		case "trsvcid":
			err = str(&o.ServiceID)
		case "nqn":
			err = str(&o.NQN)
		case "hostnqn":
			err = str(&o.HostNQN)
		case "hostid":
			err = str(&o.HostID)
		case "host_traddr":
			err = str(&o.HostAddress)
		case "host_iface":
			err = str(&o.HostIface)
		case "queue_size":
			err = num(&o.QueueSize)
		case "nr_io_queues":
			err = num(&o.IOQueues)
		case "nr_write_queues":
			err = num(&o.WriteQueues)
		case "nr_poll_queues":
			err = num(&o.PollQueues)
		case "keep_alive_tmo":
			err, nt = num(&t.KeepAlive), nt+1
		case "reconnect_delay":
			err, nt = num(&t.ReconnectDelay), nt+1
		case "ctrl_loss_tmo":
			err, nt = num(&t.CtrlLoss), nt+1
		case "fast_io_fail_tmo":
			err, nt = num(&t.FastIOFail), nt+1
		case "duplicate_connect":
			err = flag(&o.DuplicateConnect)
		case "hdr_digest":
			err = flag(&o.HeaderDigest)
		case "data_digest":
			err = flag(&o.DataDigest)
		case "dhchap_secret":
			err = str(&o.DHCHAPSecret)
		case "dhchap_ctrl_secret":
			err = str(&o.DHCHAPCtrlSecret)
		case "tls":
			err = flag(&o.TLS)
		case "keyring":
			err = num(&o.Keyring)
		case "tls_key":
			err = num(&o.TLSKey)
		case "discovery":
			err = flag(&o.Discovery)
		default:
			err = fmt.Errorf("%w: unknown option %q", ErrInvalidOptions, k)
		}
		if err != nil {
			return o, err
		}
	}
	switch nt {
	case 0:
	case 4:
		o.Timeouts = &t
	default:
		return o, fmt.Errorf("%w: set all four timeouts or none", ErrInvalidOptions)
	}
	if !seen["transport"] {
		return o, fmt.Errorf("%w: no transport", ErrInvalidOptions)
	}
	return o, nil
}
