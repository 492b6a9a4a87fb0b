package nvmf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// DefaultSysfs is the sysfs mount point.
const DefaultSysfs = "/sys"

// Controller is an NVMe controller as sysfs shows it
// (/sys/class/nvme/nvmeN).
type Controller struct {
	Name         string // "nvme3"
	Instance     int    // 3
	Transport    string // "tcp", "rdma", "fc", "loop", "pcie"
	Address      Address
	SubsystemNQN string
	Subsystem    string // "nvme-subsys2"
	State        string // "live", "connecting", "resetting", "deleting", "dead", ...
	Type         string // cntrltype: "io", "discovery", "admin" ("" on old kernels)
	CntlID       int
	HostNQN      string
	HostID       string
	// Timeouts as configured ("off" is reported as Forever). Zero when the
	// controller is not a fabrics controller.
	Timeouts Timeouts
	Paths    []Path
	// DHCHAPSecret and DHCHAPCtrlSecret are the DH-HMAC-CHAP secrets the
	// controller authenticates with (its dhchap_secret and
	// dhchap_ctrl_secret attributes, NVME_HOST_AUTH); empty when it has
	// none or the kernel lacks them. They print redacted. 6.12 makes both
	// attributes world-readable (S_IRUGO): any local user can read them.
	DHCHAPSecret, DHCHAPCtrlSecret SecretText
}

// Address is the parsed "address" attribute of a fabrics controller:
// "traddr=..,trsvcid=..[,host_traddr=..][,host_iface=..][,src_addr=..]".
type Address struct {
	TrAddr     string
	TrSvcID    string
	HostTrAddr string
	HostIface  string
	SrcAddr    string // local address actually used (tcp, 6.1+)
}

// ParseAddress parses a controller's address attribute. Unknown keys are
// ignored (newer kernels add some).
func ParseAddress(s string) Address {
	var a Address
	for _, kv := range strings.Split(strings.TrimSpace(s), ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "traddr":
			a.TrAddr = v
		case "trsvcid":
			a.TrSvcID = v
		case "host_traddr":
			a.HostTrAddr = v
		case "host_iface":
			a.HostIface = v
		case "src_addr":
			a.SrcAddr = v
		}
	}
	return a
}

// Path is one controller's view of a namespace. With native multipath it
// is the hidden block device nvme<S>c<C>n<N> under the head nvme<S>n<N>.
type Path struct {
	Name     string // "nvme2c3n1" (multipath) or "nvme3n1"
	Head     string // block device that carries I/O: "nvme2n1"
	NSID     uint32
	ANAState string // "optimized", ... ; "" without ANA
	ANAGroup uint32
}

// Subsystem is /sys/class/nvme-subsystem/nvme-subsysN.
type Subsystem struct {
	Name        string // "nvme-subsys2"
	NQN         string
	IOPolicy    string   // "numa", "round-robin", "queue-depth"
	Controllers []string // "nvme3", ...
	Heads       []string // multipath heads: "nvme2n1", ...
}

var (
	ctrlRe  = regexp.MustCompile(`^nvme(\d+)$`)
	mpathRe = regexp.MustCompile(`^nvme(\d+)c(\d+)n(\d+)$`)
	nsRe    = regexp.MustCompile(`^nvme(\d+)n(\d+)$`)
)

// The controller attributes that hold its DH-HMAC-CHAP secrets
// (Controller, Host.Rekey).
const (
	AttrDHCHAPSecret     = "dhchap_secret"
	AttrDHCHAPCtrlSecret = "dhchap_ctrl_secret"
)

// Sysfs reads NVMe host state from a sysfs tree.
type Sysfs struct{ Root string }

// Controllers lists every NVMe controller, sorted by instance.
func (s Sysfs) Controllers() ([]Controller, error) {
	dir := filepath.Join(s.Root, "class", "nvme")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nvme controllers: %w", err)
	}
	var out []Controller
	for _, e := range ents {
		if !ctrlRe.MatchString(e.Name()) {
			continue
		}
		c, err := s.Controller(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Controller) int { return a.Instance - b.Instance })
	return out, nil
}

// Controller reads one controller ("nvme3").
func (s Sysfs) Controller(name string) (Controller, error) {
	m := ctrlRe.FindStringSubmatch(name)
	if m == nil {
		return Controller{}, fmt.Errorf("controller %q: not an nvme controller name", name)
	}
	dir := filepath.Join(s.Root, "class", "nvme", name)
	if _, err := os.Stat(dir); err != nil {
		return Controller{}, fmt.Errorf("controller %s: %w", name, err)
	}
	c := Controller{Name: name}
	c.Instance, _ = strconv.Atoi(m[1])
	c.Transport = attr(dir, "transport")
	c.Address = ParseAddress(attr(dir, "address"))
	c.SubsystemNQN = attr(dir, "subsysnqn")
	c.State = attr(dir, "state")
	c.Type = attr(dir, "cntrltype")
	c.CntlID, _ = strconv.Atoi(attr(dir, "cntlid"))
	c.HostNQN = attr(dir, "hostnqn")
	c.HostID = attr(dir, "hostid")
	c.Timeouts = Timeouts{
		KeepAlive:      atoiOff(attr(dir, "kato")),
		ReconnectDelay: atoiOff(attr(dir, "reconnect_delay")),
		CtrlLoss:       atoiOff(attr(dir, "ctrl_loss_tmo")),
		FastIOFail:     atoiOff(attr(dir, "fast_io_fail_tmo")),
	}
	for _, a := range []struct {
		name string
		to   *SecretText
	}{{AttrDHCHAPSecret, &c.DHCHAPSecret}, {AttrDHCHAPCtrlSecret, &c.DHCHAPCtrlSecret}} {
		if v := attr(dir, a.name); v != "none" {
			*a.to = SecretText(v)
		}
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			n := e.Name()
			var p Path
			if mm := mpathRe.FindStringSubmatch(n); mm != nil {
				p = Path{Name: n, Head: "nvme" + mm[1] + "n" + mm[3]}
				if c.Subsystem == "" {
					c.Subsystem = "nvme-subsys" + mm[1]
				}
			} else if nsRe.MatchString(n) {
				p = Path{Name: n, Head: n}
			} else {
				continue
			}
			pdir := filepath.Join(dir, n)
			id, _ := strconv.ParseUint(attr(pdir, "nsid"), 10, 32)
			p.NSID = uint32(id)
			p.ANAState = attr(pdir, "ana_state")
			g, _ := strconv.ParseUint(attr(pdir, "ana_grpid"), 10, 32)
			p.ANAGroup = uint32(g)
			c.Paths = append(c.Paths, p)
		}
	}
	if c.Subsystem == "" {
		// The controller's device links to its subsystem: nvme-subsysN/nvmeM.
		if ents, err := os.ReadDir(filepath.Join(s.Root, "class", "nvme-subsystem")); err == nil {
			for _, e := range ents {
				if _, err := os.Lstat(filepath.Join(s.Root, "class", "nvme-subsystem", e.Name(), name)); err == nil {
					c.Subsystem = e.Name()
					break
				}
			}
		}
	}
	slices.SortFunc(c.Paths, func(a, b Path) int { return strings.Compare(a.Name, b.Name) })
	return c, nil
}

// Subsystems lists the host's NVMe subsystems.
func (s Sysfs) Subsystems() ([]Subsystem, error) {
	base := filepath.Join(s.Root, "class", "nvme-subsystem")
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nvme subsystems: %w", err)
	}
	var out []Subsystem
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "nvme-subsys") {
			continue
		}
		dir := filepath.Join(base, e.Name())
		sub := Subsystem{Name: e.Name(), NQN: attr(dir, "subsysnqn"), IOPolicy: attr(dir, "iopolicy")}
		inner, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, i := range inner {
			switch n := i.Name(); {
			case ctrlRe.MatchString(n):
				sub.Controllers = append(sub.Controllers, n)
			case nsRe.MatchString(n):
				sub.Heads = append(sub.Heads, n)
			}
		}
		out = append(out, sub)
	}
	return out, nil
}

// SetIOPolicy sets a subsystem's multipath I/O policy ("numa",
// "round-robin", "queue-depth").
func (s Sysfs) SetIOPolicy(subsystem, policy string) error {
	p := filepath.Join(s.Root, "class", "nvme-subsystem", subsystem, "iopolicy")
	if err := os.WriteFile(p, []byte(policy), 0); err != nil {
		return fmt.Errorf("set iopolicy %s of %s: %w", policy, subsystem, err)
	}
	return nil
}

// FindControllers returns the controllers connected to subsystem nqn
// (optionally only those at traddr/trsvcid when non-empty).
func FindControllers(cs []Controller, nqn, traddr, trsvcid string) []Controller {
	var out []Controller
	for _, c := range cs {
		if c.SubsystemNQN != nqn {
			continue
		}
		if traddr != "" && c.Address.TrAddr != traddr || trsvcid != "" && c.Address.TrSvcID != trsvcid {
			continue
		}
		out = append(out, c)
	}
	return out
}

func attr(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func atoiOff(s string) int {
	if s == "off" {
		return Forever
	}
	n, _ := strconv.Atoi(s)
	return n
}
