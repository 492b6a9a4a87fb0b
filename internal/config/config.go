package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fabraid/fabraid/internal/units"
)

// DefaultPath is where fabraidd and fabraid look for the configuration.
const DefaultPath = "/etc/fabraid/fabraid.conf"

// Config is the node configuration.
type Config struct {
	// NodeName names this node (failure domain of its drives). Default: the
	// host name.
	NodeName string
	// StorageInterfaces and StorageCIDRs select the storage network; they are
	// recorded for the cluster layer (one node needs neither).
	StorageInterfaces []string
	StorageCIDRs      []netip.Prefix
	// StateDir holds claims and volume records. Default /var/lib/fabraid.
	StateDir string
	// APISocket is the daemon's root-only unix socket. Default
	// /run/fabraid/api.sock.
	APISocket string
	// MetricsAddress is host:port for Prometheus metrics; empty disables
	// them. Default 127.0.0.1:9436.
	MetricsAddress string
	// ExportAddress and ExportPort are where volumes are exported over
	// nvme-tcp (the node connects to itself there). Default 127.0.0.1:4420.
	ExportAddress string
	ExportPort    int
	// EngineMode says how volume engines run: EngineAuto (default: as
	// systemd units when systemd is PID 1 and the fabraid-engine@.service
	// template is installed, else as child processes), EngineSystemd or
	// EngineProcess.
	EngineMode string
	// Cluster holds the cluster keys (see Cluster).
	Cluster Cluster
	// NSDDiscovery is what the Storage Scale nsddevices user exit returns
	// after listing fabraid's volumes: NSDMerge (default; return 1, Scale
	// also runs its built-in discovery and merges) or NSDExclusive (return
	// 0, Scale uses only fabraid's list).
	NSDDiscovery string
	// TargetBackend selects the NVMe-oF target backend (docs/plugins.md):
	// BackendNvmet (default: the kernel target, its backend in fabraidd's
	// process), BackendNvmetPlugin (the same backend in the plugin process
	// /usr/libexec/fabraid/plugins/fabraid-plugin-nvmet) or BackendSPDK
	// (SPDK nvmf_tgt through fabraid-plugin-spdk).
	TargetBackend string
	// SPDKSocket is nvmf_tgt's JSON-RPC socket for BackendSPDK. Default
	// /var/tmp/spdk.sock.
	SPDKSocket string
	// AssemblyTimeout is the last-resort wait (assembly_timeout, seconds):
	// a volume with expected members missing starts degraded this long
	// after its first member was seen (docs/admin-guide.md, "Boot").
	// Default 30 s.
	AssemblyTimeout time.Duration
	// UdevProbe (udev_probe) lets "fabraid udev-probe", run by
	// 69-fabraid.rules for every disk event, read the disk's superblock
	// area. False: it reads nothing and reports no member, so udev gives
	// members no FABRAID_*/ID_FS_* properties, no links and no
	// SYSTEMD_WANTS (docs/admin-guide.md, "Boot"). Default true.
	UdevProbe bool
	// UblkZeroCopy (ublk_zero_copy) is ZeroCopyAuto (default: a volume's
	// ublk device reads zero copy where the kernel's ublk offers
	// AUTO_BUF_REG, 6.16+, and copies elsewhere) or ZeroCopyOff (always
	// the copy path; engines run with --no-zero-copy). It applies to
	// engines started after the daemon read it: a running engine keeps
	// its device, which a restart re-attaches with the flags it was
	// created with.
	UblkZeroCopy string
	// RebuildBusyRate (rebuild_busy_rate, bytes per second) paces an
	// engine's rebuilds (returning members' resyncs too) and scrubs
	// while its volume serves foreground I/O (a request within the last
	// 500 ms), as md's speed_limit_min: otherwise they run at the rate
	// asked (unlimited by default), yielding to requests in flight. Default 100 MiB/s;
	// 0: no pacing for foreground I/O. Applies to engines started after
	// the daemon read it.
	RebuildBusyRate int64

	// Warnings are the lines Parse skipped: keys this version does not
	// know (ErrUnknownKey), as after a downgrade (a key of the newer
	// release) or an upgrade (a key since removed). A node must not stop
	// at boot for a key it cannot use, so they are not errors; fabraidd
	// logs each at start. Invalid values of known keys remain errors.
	Warnings []*Error
}

// ErrUnknownKey is the error of a Warnings entry for a key this version
// does not know.
var ErrUnknownKey = errors.New("unknown key")

// Target backends (the target_backend key).
const (
	BackendNvmet       = "nvmet"
	BackendNvmetPlugin = "nvmet-plugin"
	BackendSPDK        = "spdk"
)

// Engine modes (the engine_mode key).
const (
	EngineAuto    = "auto"
	EngineSystemd = "systemd"
	EngineProcess = "process"
)

// ublk zero-copy settings (the ublk_zero_copy key).
const (
	ZeroCopyAuto = "auto"
	ZeroCopyOff  = "off"
)

// DefaultRebuildBusyRate is rebuild_busy_rate's default, 100 MiB/s: a
// few per cent of an NVMe drive's bandwidth, so foreground I/O keeps
// most of it, while a 7.68 TB member still rebuilds in under a day under
// constant foreground load (md's speed_limit_min, 1 MB/s, would take
// three months).
const DefaultRebuildBusyRate = 100 << 20

// Storage Scale discovery modes (the nsd_discovery key).
const (
	NSDMerge     = "merge"
	NSDExclusive = "exclusive"
)

// Default returns the configuration used for keys a file does not set.
func Default() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return Config{
		NodeName:        host,
		StateDir:        "/var/lib/fabraid",
		APISocket:       "/run/fabraid/api.sock",
		MetricsAddress:  "127.0.0.1:9436",
		ExportAddress:   "127.0.0.1",
		ExportPort:      4420,
		EngineMode:      EngineAuto,
		Cluster:         defaultCluster(),
		NSDDiscovery:    NSDMerge,
		TargetBackend:   BackendNvmet,
		SPDKSocket:      "/var/tmp/spdk.sock",
		AssemblyTimeout: 30 * time.Second,
		UdevProbe:       true,
		UblkZeroCopy:    ZeroCopyAuto,
		RebuildBusyRate: DefaultRebuildBusyRate,
	}
}

// Error is a configuration error at one line of one file.
type Error struct {
	File string
	Line int    // 0: not tied to a line
	Key  string // "" when the line has no key
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckNodeName applies the node_name rule (also failure_domain's): 1-63
// ASCII letters, digits, '.', '_' or '-', the first a letter or digit.
// The cluster's join service checks the names it certifies with it.
func CheckNodeName(s string) error {
	if !nodeNameRE.MatchString(s) {
		return fmt.Errorf("%q: want 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", s)
	}
	return nil
}

// Parse reads a configuration from r; name is used in error messages.
func Parse(r io.Reader, name string) (Config, error) {
	c := Default()
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, val, ok := strings.Cut(text, "=")
		if !ok {
			return Config{}, &Error{File: name, Line: line, Err: fmt.Errorf("want key = value, got %q", text)}
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if prev, dup := seen[key]; dup {
			return Config{}, &Error{File: name, Line: line, Key: key, Err: fmt.Errorf("repeated (first set on line %d)", prev)}
		}
		seen[key] = line
		if err := c.set(key, val); errors.Is(err, ErrUnknownKey) {
			c.Warnings = append(c.Warnings, &Error{File: name, Line: line, Key: key, Err: err})
		} else if err != nil {
			return Config{}, &Error{File: name, Line: line, Key: key, Err: err}
		}
	}
	if err := sc.Err(); err != nil {
		return Config{}, &Error{File: name, Err: err}
	}
	if err := c.Cluster.check(seen); err != nil {
		err.File = name
		return Config{}, err
	}
	return c, nil
}

func list(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (c *Config) set(key, val string) error {
	switch key {
	case "node_name":
		if err := CheckNodeName(val); err != nil {
			return err
		}
		c.NodeName = val
	case "storage_interfaces":
		c.StorageInterfaces = nil
		for _, ifc := range list(val) {
			if len(ifc) > 15 || strings.ContainsAny(ifc, "/ \t") {
				return fmt.Errorf("%q is not an interface name", ifc)
			}
			c.StorageInterfaces = append(c.StorageInterfaces, ifc)
		}
	case "storage_cidrs":
		c.StorageCIDRs = nil
		for _, s := range list(val) {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return fmt.Errorf("%q is not a CIDR (want e.g. 10.10.0.0/16)", s)
			}
			c.StorageCIDRs = append(c.StorageCIDRs, p.Masked())
		}
	case "state_dir", "api_socket":
		if !filepath.IsAbs(val) {
			return fmt.Errorf("%q: want an absolute path", val)
		}
		if key == "state_dir" {
			c.StateDir = filepath.Clean(val)
		} else {
			c.APISocket = filepath.Clean(val)
		}
	case "metrics_address":
		if val != "" {
			if _, port, err := net.SplitHostPort(val); err != nil || port == "" {
				return fmt.Errorf("%q: want host:port (empty disables metrics)", val)
			}
		}
		c.MetricsAddress = val
	case "export_address":
		if _, err := netip.ParseAddr(val); err != nil {
			return fmt.Errorf("%q is not an IP address", val)
		}
		c.ExportAddress = val
	case "export_port":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: want a TCP port 1..65535", val)
		}
		c.ExportPort = n
	case "engine_mode":
		switch val {
		case EngineAuto, EngineSystemd, EngineProcess:
			c.EngineMode = val
		default:
			return fmt.Errorf("%q: want auto, systemd or process", val)
		}
	case "nsd_discovery":
		switch val {
		case NSDMerge, NSDExclusive:
			c.NSDDiscovery = val
		default:
			return fmt.Errorf("%q: want merge (Scale also runs its own discovery) or exclusive (Scale uses only fabraid's devices)", val)
		}
	case "target_backend":
		switch val {
		case BackendNvmet, BackendNvmetPlugin, BackendSPDK:
			c.TargetBackend = val
		default:
			return fmt.Errorf("%q: want nvmet (the kernel target), nvmet-plugin (the same through its plugin process) or spdk (SPDK nvmf_tgt)", val)
		}
	case "spdk_rpc_socket":
		if !filepath.IsAbs(val) {
			return fmt.Errorf("%q: want an absolute path", val)
		}
		c.SPDKSocket = filepath.Clean(val)
	case "assembly_timeout":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > 3600 {
			return fmt.Errorf("%q: want seconds, 1..3600", val)
		}
		c.AssemblyTimeout = time.Duration(n) * time.Second
	case "udev_probe":
		switch val {
		case "true":
			c.UdevProbe = true
		case "false":
			c.UdevProbe = false
		default:
			return fmt.Errorf("%q: want true or false", val)
		}
	case "ublk_zero_copy":
		if val != ZeroCopyAuto && val != ZeroCopyOff {
			return fmt.Errorf("%q: want auto (zero-copy reads where the kernel's ublk offers them) or off (always the copy path)", val)
		}
		c.UblkZeroCopy = val
	case "rebuild_busy_rate":
		n, err := parseRate(val)
		if err != nil {
			return err
		}
		c.RebuildBusyRate = n
	default:
		if ok, err := c.Cluster.set(key, val); ok {
			return err
		}
		return fmt.Errorf("%w, ignored (known: %s)", ErrUnknownKey, strings.Join(Keys(), ", "))
	}
	return nil
}

const nodeKeys = "node_name, storage_interfaces, storage_cidrs, state_dir, api_socket, metrics_address, export_address, export_port, engine_mode, nsd_discovery, target_backend, spdk_rpc_socket, assembly_timeout, udev_probe, ublk_zero_copy, rebuild_busy_rate"

// Keys returns every key this version knows, in the order of the manual.
func Keys() []string { return strings.Split(nodeKeys+", "+clusterKeys, ", ") }

// Load reads the configuration file at path.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// Lookup returns the value of key in the configuration file at path
// without parsing the other lines (found is false when the file or the key
// is missing). For udev-probe, which must honour udev_probe even when
// another line of the file is wrong.
func Lookup(path, key string) (val string, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("config: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && !strings.HasPrefix(k, "#") && strings.TrimSpace(k) == key {
			val, found = strings.TrimSpace(v), true
		}
	}
	return val, found, nil
}

// LoadOrDefault is Load, except that a missing file at path gives Default.
func LoadOrDefault(path string) (Config, error) {
	c, err := Load(path)
	if errors.Is(err, os.ErrNotExist) {
		return Default(), nil
	}
	return c, err
}

// parseRate parses bytes per second (units.ParseBytes, with an optional
// "/s"), at most 1 PiB/s.
func parseRate(val string) (int64, error) {
	n, err := units.ParseBytes(strings.TrimSuffix(val, "/s"))
	if err != nil || n > 1<<50 {
		return 0, fmt.Errorf("%q: want bytes per second, e.g. 100M (K, M, G, T: powers of 1024), or 0", val)
	}
	return n, nil
}
