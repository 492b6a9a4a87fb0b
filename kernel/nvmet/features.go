package nvmet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Features lists optional nvmet capabilities, detected by the presence of
// configfs attributes (never by kernel version: distributions backport).
type Features struct {
	Auth bool // hosts/*/dhchap_key: DH-HMAC-CHAP (6.0, NVME_TARGET_AUTH)
	// TLS: a tcp port takes addr_tsas "tls1.3" (Linux 6.7 with
	// NVME_TARGET_TCP_TLS, and the .nvme keyring present when the port
	// was made). Read sets it from the attribute's presence alone.
	TLS          bool
	Firmware     bool // subsystems/*/attr_firmware (6.2)
	MaxQueueSize bool // ports/*/param_max_queue_size (6.9)
	Passthru     bool // subsystems/*/passthru (NVME_TARGET_PASSTHRU)
	// Transports lists the target transport modules currently loaded
	// (/sys/module/nvmet_tcp, nvme_loop, nvmet_rdma, nvmet_fc). A port of
	// another transport makes the kernel try request_module when linked.
	Transports []Transport
}

func (f Features) String() string {
	var s []string
	add := func(ok bool, name string) {
		if ok {
			s = append(s, name)
		}
	}
	add(f.Auth, "auth")
	add(f.TLS, "tls")
	add(f.Firmware, "firmware")
	add(f.MaxQueueSize, "max_queue_size")
	add(f.Passthru, "passthru")
	for _, t := range f.Transports {
		s = append(s, "transport:"+string(t))
	}
	return strings.Join(s, ",")
}

// RequireTLS returns nil when nvmet's tcp ports can require TLS, else an
// error wrapping ErrNotSupported that names what is missing.
func (f Features) RequireTLS() error {
	if f.TLS {
		return nil
	}
	return fmt.Errorf("nvmet TLS: %w: needs Linux 6.7 or later with NVME_TARGET_TCP_TLS (and NVME_TCP_TLS on hosts), the nvme_keyring module loaded before nvmet, and tlshd", ErrNotSupported)
}

// Probe detects Features by creating a throw-away host, subsystem and port
// under root (names from own: "<prefix>probe" and port own.MaxPort),
// looking at their attributes and removing them again. An interrupted
// probe leaves owned objects that the next Apply removes. sysModule is
// normally "/sys/module".
func Probe(root, sysModule string, own Ownership) (Features, error) {
	var f Features
	nqn := own.SubsystemPrefix + "probe"
	probes := []struct {
		dir  string
		attr string
		set  *bool
	}{
		{filepath.Join("hosts", nqn), "dhchap_key", &f.Auth},
		{filepath.Join("subsystems", nqn), "attr_firmware", &f.Firmware},
		{filepath.Join("ports", fmt.Sprint(own.MaxPort)), "addr_tsas", &f.TLS},
	}
	for _, p := range probes {
		dir := filepath.Join(root, p.dir)
		if _, err := os.Stat(dir); err == nil {
			return f, fmt.Errorf("probe nvmet features: %s already exists", p.dir)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return f, fmt.Errorf("probe nvmet features: %w", newError("mkdir", p.dir, "", err))
		}
		_, err := os.Stat(filepath.Join(dir, p.attr))
		*p.set = err == nil
		if p.attr == "attr_firmware" {
			_, err := os.Stat(filepath.Join(dir, "passthru"))
			f.Passthru = err == nil
		}
		if p.attr == "addr_tsas" {
			_, err := os.Stat(filepath.Join(dir, "param_max_queue_size"))
			f.MaxQueueSize = err == nil
			// The attribute exists from 6.7 on whatever the
			// configuration; only a write of tls1.3 tells.
			f.TLS = f.TLS && writeAttr(filepath.Join(dir, "addr_trtype"), string(TCP)) == nil &&
				writeAttr(filepath.Join(dir, "addr_tsas"), "tls1.3") == nil
		}
		if err := os.Remove(dir); err != nil {
			return f, fmt.Errorf("probe nvmet features: %w", newError("rmdir", p.dir, "", err))
		}
	}
	for _, m := range []struct {
		mod string
		t   Transport
	}{{"nvmet_tcp", TCP}, {"nvmet_rdma", RDMA}, {"nvmet_fc", FC}, {"nvme_loop", Loop}} {
		if _, err := os.Stat(filepath.Join(sysModule, m.mod)); err == nil {
			f.Transports = append(f.Transports, m.t)
		}
	}
	return f, nil
}

// HostAuth reports whether the nvmet target under root has DH-HMAC-CHAP
// (hosts/*/dhchap_key, NVME_TARGET_AUTH) without touching anything fabraid
// owns: it makes the host entry hosts/<nqn>, looks for the attribute and
// removes the entry again. nqn must be a name nobody else uses (a host
// entry that exists already is refused, not removed).
func HostAuth(root, nqn string) (bool, error) {
	dir := filepath.Join(root, "hosts", nqn)
	if _, err := os.Stat(dir); err == nil {
		return false, fmt.Errorf("probe nvmet auth: hosts/%s already exists", nqn)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return false, fmt.Errorf("probe nvmet auth: %w", newError("mkdir", filepath.Join("hosts", nqn), "", err))
	}
	_, err := os.Stat(filepath.Join(dir, "dhchap_key"))
	if rerr := os.Remove(dir); rerr != nil {
		return false, fmt.Errorf("probe nvmet auth: %w", newError("rmdir", filepath.Join("hosts", nqn), "", rerr))
	}
	return err == nil, nil
}

// PortTLS reports whether the nvmet target under root can make a tcp port
// take TLS 1.3 (NVME_TARGET_TCP_TLS and the .nvme keyring) without
// touching anything fabraid owns: it makes ports/<id> (an id outside
// the ownerships' ranges), writes addr_trtype tcp and addr_tsas tls1.3,
// and removes the port again.
func PortTLS(root string, id uint16) (bool, error) {
	rel := filepath.Join("ports", fmt.Sprint(id))
	dir := filepath.Join(root, rel)
	if _, err := os.Stat(dir); err == nil {
		return false, fmt.Errorf("probe nvmet TLS: %s already exists", rel)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return false, fmt.Errorf("probe nvmet TLS: %w", newError("mkdir", rel, "", err))
	}
	ok := writeAttr(filepath.Join(dir, "addr_trtype"), string(TCP)) == nil && writeAttr(filepath.Join(dir, "addr_tsas"), "tls1.3") == nil
	if err := os.Remove(dir); err != nil {
		return false, fmt.Errorf("probe nvmet TLS: %w", newError("rmdir", rel, "", err))
	}
	return ok, nil
}
