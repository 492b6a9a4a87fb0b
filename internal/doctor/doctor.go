// Package doctor inspects a node for everything fabraid needs from its
// kernel and configuration — configfs, the nvmet target and its TCP
// transport and DH-HMAC-CHAP, the nvme-tcp initiator with native
// multipath, ublk_drv and its feature bits, io_uring, the NVMe host
// identity — and says, for each missing piece, exactly how to fix it.
//
// Checks read /proc, /sys and /etc under a root directory (normally "/"),
// and ask the kernel itself through injected probes (ublk GET_FEATURES,
// an io_uring setup), so they never guess from a version string.
package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fabraid/fabraid/internal/fabrictls"
)

// Status of one check.
type Status string

const (
	OK      Status = "ok"      // present and usable
	Missing Status = "missing" // required and absent: fabraid cannot run its part
	Warn    Status = "warn"    // works, but not as recommended
)

// Check is the outcome of one inspection.
type Check struct {
	Name     string `json:"name"`
	Status   Status `json:"status"`
	Detail   string `json:"detail"`
	Fix      string `json:"fix,omitempty"`
	Required bool   `json:"required"`
}

// Report is the whole inspection.
type Report struct {
	Kernel string  `json:"kernel"`
	Checks []Check `json:"checks"`
}

// Healthy reports whether every required check passed.
func (r *Report) Healthy() bool {
	for _, c := range r.Checks {
		if c.Required && c.Status == Missing {
			return false
		}
	}
	return true
}

// Probes ask the running kernel directly. A nil probe is skipped.
type Probes struct {
	// UblkFeatures returns the GET_FEATURES bits and their names.
	UblkFeatures func() (uint64, []string, error)
	// IOUring sets up and tears down a small ring.
	IOUring func() error
	// NvmetAuth says whether the nvmet target has DH-HMAC-CHAP (a
	// throw-away configfs host entry has dhchap_key; nvmet.HostAuth).
	NvmetAuth func() (bool, error)
	// TLS reports the NVMe/TCP TLS support of the node's target and host
	// sides (fabrictls.Support; asked only when nvme_tls is not off).
	TLS func() (target, host fabrictls.Support, err error)
}

// Doctor runs the checks against the system under Root.
type Doctor struct {
	Root   string // "/" on a live system
	Probes Probes
	// AllowUnauthenticated is require_auth = false in the configuration:
	// nvmet without DH-HMAC-CHAP is then a warning (the node exports by
	// host NQN alone), not a missing piece (the node refuses to export).
	AllowUnauthenticated bool
	// NVMeTLS is nvme_tls in the configuration ("" is off): under
	// required, TLS support is a required piece, under on a warning.
	NVMeTLS fabrictls.Mode
}

func (d *Doctor) path(p string) string { return filepath.Join(d.Root, p) }

func (d *Doctor) exists(p string) bool {
	_, err := os.Stat(d.path(p))
	return err == nil
}

func (d *Doctor) read(p string) string {
	b, _ := os.ReadFile(d.path(p))
	return strings.TrimSpace(string(b))
}

// moduleLoaded reports whether a module is loaded or built in (both show
// up under /sys/module once active).
func (d *Doctor) moduleLoaded(name string) bool { return d.exists("/sys/module/" + name) }

// Run performs every check.
func (d *Doctor) Run() *Report {
	r := &Report{Kernel: d.read("/proc/sys/kernel/osrelease")}
	r.Checks = append(r.Checks,
		d.checkConfigfs(),
		d.checkModule("nvmet", "nvmet", "NVMe-oF target (exports drives and volumes)",
			"/sys/kernel/config/nvmet", "CONFIG_NVME_TARGET (Linux 4.8+; RHEL 8+)"),
		d.checkModule("nvmet-tcp", "nvmet_tcp", "NVMe/TCP target transport",
			"", "CONFIG_NVME_TARGET_TCP (Linux 5.0+; RHEL 8.2+)"),
		d.checkNvmetAuth(),
		d.checkModule("nvme-tcp", "nvme_tcp", "NVMe/TCP initiator (imports peers' drives)",
			"/dev/nvme-fabrics", "CONFIG_NVME_TCP (Linux 5.0+; RHEL 8.2+)"),
		d.checkMultipath(),
		d.checkUblk(),
		d.checkIOUring(),
		d.checkHostNQN(),
		d.checkHostID(),
		d.checkTLS(),
	)
	return r
}

func (d *Doctor) checkConfigfs() Check {
	c := Check{Name: "configfs", Required: true}
	mounts := d.read("/proc/mounts")
	switch {
	case regexp.MustCompile(`(?m)^\S+ /sys/kernel/config configfs `).MatchString(mounts):
		c.Status, c.Detail = OK, "mounted at /sys/kernel/config"
	case strings.Contains(d.read("/proc/filesystems"), "configfs"):
		c.Status, c.Detail = Missing, "configfs is available but not mounted"
		c.Fix = "mount -t configfs none /sys/kernel/config"
	default:
		c.Status, c.Detail = Missing, "configfs is not in this kernel's filesystems"
		c.Fix = "modprobe configfs && mount -t configfs none /sys/kernel/config (kernel needs CONFIG_CONFIGFS_FS)"
	}
	return c
}

// checkModule checks a module by /sys/module and, when given, a path the
// module provides.
func (d *Doctor) checkModule(name, module, role, provides, kernelNeed string) Check {
	c := Check{Name: name, Required: true}
	switch {
	case d.moduleLoaded(module) && (provides == "" || d.exists(provides)):
		c.Status, c.Detail = OK, role+": loaded"
	case d.moduleLoaded(module):
		c.Status, c.Detail = Missing, fmt.Sprintf("%s: module loaded but %s is absent", role, provides)
		c.Fix = "mount configfs at /sys/kernel/config, then reload: modprobe -r " + module + " && modprobe " + module
	default:
		c.Status, c.Detail = Missing, role+": module "+module+" not loaded"
		c.Fix = "modprobe " + module + " (kernel needs " + kernelNeed + "); fabraid's RPM loads it at boot via modules-load.d. " +
			ModulePackageHint(module)
	}
	return c
}

// moduleFiles are the file names (without .ko and compression) of the
// modules whose package ModulePackageHint names.
var moduleFiles = map[string]string{"nvmet": "nvmet", "nvmet_tcp": "nvmet-tcp", "nvme_tcp": "nvme-tcp", "ublk_drv": "ublk_drv"}

// ModulePackageHint says how to find the package that holds module when
// modprobe cannot find it. On RHEL 9 and 10 the kernel's modules are split
// over kernel-modules-core, kernel-modules and kernel-modules-extra; which
// of them holds nvmet, nvmet-tcp and ublk_drv has not been checked on a
// RHEL node (docs/install.md), so the hint names the commands that tell
// instead of a package name.
func ModulePackageHint(module string) string {
	file := moduleFiles[module]
	if file == "" {
		file = module
	}
	return "If modprobe says the module is not found: modinfo -n " + module + " shows whether this kernel has it installed; " +
		"on RHEL 9/10 dnf provides '*/" + file + ".ko*' names the package (kernel-modules-core, kernel-modules or " +
		"kernel-modules-extra) to install for the running kernel (dnf install PACKAGE-$(uname -r))"
}

// NvmetAuthFix is the fix the nvmet-auth check names.
const NvmetAuthFix = "boot a kernel built with CONFIG_NVME_TARGET_AUTH=y (nvmet's DH-HMAC-CHAP, Linux 6.0+; " +
	"Debian's 6.12 has it, its 6.1 does not)"

// NvmetAuthOptOut is the second fix the nvmet-auth check names.
const NvmetAuthOptOut = "or, as a conscious opt-out, set require_auth = false in fabraid.conf: the node then exports by host NQN alone, " +
	"which any machine on the storage network can present"

// checkNvmetAuth: without DH-HMAC-CHAP in nvmet a cluster node refuses to
// export its drives and volumes (require_auth, the default: a missing
// piece), or with require_auth = false exports them allowing their hosts
// by host NQN alone (a warning).
func (d *Doctor) checkNvmetAuth() Check {
	c := Check{Name: "nvmet-auth", Required: !d.AllowUnauthenticated}
	if !d.moduleLoaded("nvmet") || !d.exists("/sys/kernel/config/nvmet") {
		c.Status, c.Detail = Warn, "nvmet is not loaded: cannot tell whether it has DH-HMAC-CHAP"
		c.Fix = "modprobe nvmet (with configfs mounted) and run fabraid doctor again"
		return c
	}
	has, known, why := false, false, ""
	if p := d.Probes.NvmetAuth; p != nil {
		if ok, err := p(); err == nil {
			has, known = ok, true
		} else {
			why = " (probe: " + err.Error() + ")"
		}
	}
	if !known {
		// Without the probe: a host entry that exists already says it.
		if hosts, err := os.ReadDir(d.path("/sys/kernel/config/nvmet/hosts")); err == nil && len(hosts) > 0 {
			has, known = d.exists(filepath.Join("/sys/kernel/config/nvmet/hosts", hosts[0].Name(), "dhchap_key")), true
		}
	}
	switch {
	case !known:
		c.Status, c.Detail = Warn, "cannot tell whether nvmet has DH-HMAC-CHAP"+why
		c.Fix = "run fabraid doctor as root"
	case has:
		c.Status, c.Detail = OK, "nvmet has DH-HMAC-CHAP: cluster exports require each host's secret"
	case !d.AllowUnauthenticated:
		c.Status = Missing
		c.Detail = "nvmet has no DH-HMAC-CHAP (no hosts/*/dhchap_key) and require_auth is on: in a cluster this node " +
			"refuses to export its drives and volumes and owns no volume (fabraidd logs \"exports refused\", cluster status " +
			"shows REFUSED) rather than allow hosts by host NQN alone"
		c.Fix = NvmetAuthFix + "; " + NvmetAuthOptOut
	default:
		c.Status = Warn
		c.Detail = "nvmet has no DH-HMAC-CHAP (no hosts/*/dhchap_key) and require_auth = false: in a cluster this node's " +
			"drive and volume exports allow their hosts by host NQN alone, which any machine on the storage network can present " +
			"(host NQNs are readable in etcd and sent in clear)"
		c.Fix = NvmetAuthFix
	}
	return c
}

func (d *Doctor) checkMultipath() Check {
	c := Check{Name: "nvme-multipath", Required: true}
	v := d.read("/sys/module/nvme_core/parameters/multipath")
	switch v {
	case "Y", "1":
		c.Status, c.Detail = OK, "native NVMe multipath enabled"
	case "":
		c.Status, c.Detail = Missing, "nvme_core not loaded, multipath unknown"
		c.Fix = "modprobe nvme_core (loaded with nvme-tcp)"
	default:
		c.Status, c.Detail = Missing, "native NVMe multipath is off: volume failover needs it"
		c.Fix = "boot with nvme_core.multipath=Y (RHEL: it defaults to Y from RHEL 9)"
	}
	return c
}

func (d *Doctor) checkUblk() Check {
	c := Check{Name: "ublk", Required: true}
	if !d.moduleLoaded("ublk_drv") {
		c.Status, c.Detail = Missing, "ublk_drv not loaded: volumes cannot be served as block devices"
		c.Fix = "modprobe ublk_drv (kernel needs CONFIG_BLK_DEV_UBLK: Linux 6.0+ with user recovery from 6.1; RHEL 9.2+, where ublk is a technology preview; " +
			"Debian 12's 6.1 kernel lacks it — use the 6.12 backports kernel). " + ModulePackageHint("ublk_drv")
		return c
	}
	if !d.exists("/dev/ublk-control") {
		c.Status, c.Detail = Missing, "ublk_drv loaded but /dev/ublk-control is absent"
		c.Fix = "check udev/devtmpfs: the misc device ublk-control should appear when ublk_drv loads"
		return c
	}
	if d.Probes.UblkFeatures == nil {
		c.Status, c.Detail = OK, "ublk_drv loaded, /dev/ublk-control present"
		return c
	}
	bits, names, err := d.Probes.UblkFeatures()
	if err != nil {
		c.Status, c.Detail = Missing, fmt.Sprintf("GET_FEATURES on /dev/ublk-control failed: %v", err)
		c.Fix = "run as root; the kernel needs ublk with UBLK_F_CMD_IOCTL_ENCODE or GET_FEATURES (Linux 6.1+)"
		return c
	}
	c.Status, c.Detail = OK, fmt.Sprintf("features 0x%x: %s", bits, strings.Join(names, " "))
	if !strings.Contains(" "+strings.Join(names, " ")+" ", " USER_RECOVERY ") {
		c.Status = Missing
		c.Fix = "the kernel lacks UBLK_F_USER_RECOVERY (Linux 6.1+): engine restarts would fail I/O"
	}
	return c
}

func (d *Doctor) checkIOUring() Check {
	c := Check{Name: "io_uring", Required: true}
	switch d.read("/proc/sys/kernel/io_uring_disabled") {
	case "2":
		c.Status, c.Detail = Missing, "io_uring is disabled (kernel.io_uring_disabled=2)"
		c.Fix = "sysctl -w kernel.io_uring_disabled=0 (and in /etc/sysctl.d)"
		return c
	case "1":
		c.Status, c.Detail = Warn, "io_uring restricted to the io_uring_group (kernel.io_uring_disabled=1); fabraid runs as root, which is allowed"
	}
	if d.Probes.IOUring != nil {
		if err := d.Probes.IOUring(); err != nil {
			c.Status, c.Detail = Missing, fmt.Sprintf("io_uring setup failed: %v", err)
			c.Fix = "kernel needs CONFIG_IO_URING (Linux 5.1+; on RHEL 9 enable it: sysctl kernel.io_uring_disabled=0)"
			return c
		}
	}
	if c.Status == "" {
		c.Status, c.Detail = OK, "io_uring available"
	}
	return c
}

var (
	hostNQNRE = regexp.MustCompile(`^nqn\.[0-9]{4}-[0-9]{2}\.[a-z0-9.-]+:.{1,200}$`)
	uuidRE    = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

func (d *Doctor) checkHostNQN() Check {
	c := Check{Name: "hostnqn", Required: true}
	v := d.read("/etc/nvme/hostnqn")
	switch {
	case v == "":
		c.Status, c.Detail = Missing, "/etc/nvme/hostnqn is missing or empty: exports allow hosts by NQN"
		c.Fix = `mkdir -p /etc/nvme && echo "nqn.2014-08.org.nvmexpress:uuid:$(cat /proc/sys/kernel/random/uuid)" > /etc/nvme/hostnqn (or: nvme gen-hostnqn > /etc/nvme/hostnqn)`
	case !hostNQNRE.MatchString(v):
		c.Status, c.Detail = Missing, fmt.Sprintf("/etc/nvme/hostnqn holds %q, not a valid NQN", v)
		c.Fix = "nvme gen-hostnqn > /etc/nvme/hostnqn"
	default:
		c.Status, c.Detail = OK, v
	}
	return c
}

func (d *Doctor) checkHostID() Check {
	c := Check{Name: "hostid", Required: true}
	v := d.read("/etc/nvme/hostid")
	nqn := d.read("/etc/nvme/hostnqn")
	switch {
	case v == "":
		c.Status, c.Detail = Missing, "/etc/nvme/hostid is missing: connections from this host must use one consistent host ID"
		c.Fix = "write the UUID of /etc/nvme/hostnqn (its part after 'uuid:') to /etc/nvme/hostid"
	case !uuidRE.MatchString(v):
		c.Status, c.Detail = Missing, fmt.Sprintf("/etc/nvme/hostid holds %q, not a UUID", v)
		c.Fix = "write a UUID (the one in /etc/nvme/hostnqn) to /etc/nvme/hostid"
	case strings.Contains(nqn, ":uuid:") && !strings.EqualFold(nqn[strings.LastIndex(nqn, ":uuid:")+6:], v):
		c.Status, c.Detail = Warn, "hostid differs from the UUID in hostnqn (nvme-cli keeps them equal)"
		c.Fix = "write the UUID of /etc/nvme/hostnqn to /etc/nvme/hostid"
	default:
		c.Status, c.Detail = OK, v
	}
	return c
}

// TLSFix is how to give a node NVMe/TCP TLS.
const TLSFix = "boot a kernel with CONFIG_NVME_TARGET_TCP_TLS and CONFIG_NVME_TCP_TLS (Linux 6.7+); modprobe nvme_keyring tls; " +
	"install tlshd (ktls-utils), put keyrings=.nvme under [authenticate] in /etc/tlshd.conf and start it (systemctl enable --now tlshd)"

// checkTLS: under nvme_tls = required a node without NVMe/TCP TLS on
// either side exports or imports nothing (a missing piece); under on its
// member connections stay plain (a warning); off is not checked.
func (d *Doctor) checkTLS() Check {
	c := Check{Name: "nvme-tls", Required: d.NVMeTLS == fabrictls.Required}
	if d.NVMeTLS == "" || d.NVMeTLS == fabrictls.Off {
		c.Status, c.Detail = OK, "nvme_tls = off: member connections are plain NVMe/TCP (not checked)"
		return c
	}
	if d.Probes.TLS == nil {
		c.Status, c.Detail, c.Fix = Warn, "cannot tell whether this node can do NVMe/TCP TLS", "run fabraid doctor as root"
		return c
	}
	tg, h, err := d.Probes.TLS()
	if err != nil {
		c.Status, c.Detail, c.Fix = Warn, "cannot tell whether this node can do NVMe/TCP TLS: "+err.Error(), "run fabraid doctor as root with nvmet loaded"
		return c
	}
	var lacks []string
	if !tg.OK() {
		lacks = append(lacks, "its target lacks "+tg.Missing(fabrictls.TargetOption))
	}
	if !h.OK() {
		lacks = append(lacks, "its host side lacks "+h.Missing(fabrictls.HostOption))
	}
	switch {
	case len(lacks) == 0:
		c.Status, c.Detail = OK, fmt.Sprintf("nvme_tls = %s: target and host can do NVMe/TCP TLS (nvmet takes tls1.3, nvme-tcp takes tls, .nvme keyring, tlshd running)", d.NVMeTLS)
		return c
	case d.NVMeTLS == fabrictls.Required:
		c.Status = Missing
		c.Detail = "nvme_tls = required and this node cannot do NVMe/TCP TLS: " + strings.Join(lacks, "; ") +
			": it exports no drives (fabraidd logs \"exports refused\") or imports no members (\"imports refused\") without it"
	default:
		c.Status = Warn
		c.Detail = "nvme_tls = on and this node cannot do NVMe/TCP TLS: " + strings.Join(lacks, "; ") + ": its member connections stay plain"
	}
	c.Fix = TLSFix
	return c
}
