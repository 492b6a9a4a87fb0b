package nvmf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fabraid/fabraid/kernel/internal/nvmesys"
)

// FabricsDevice is the control device of nvme-fabrics.
const FabricsDevice = "/dev/nvme-fabrics"

// Host is the initiator side of this machine: /dev/nvme-fabrics, /dev and
// sysfs. The zero value is not usable; use NewHost. A Host is safe for
// concurrent use.
type Host struct {
	Fabrics string // /dev/nvme-fabrics
	Dev     string // /dev
	Sysfs   Sysfs
}

// NewHost returns a Host on the real system paths.
func NewHost() *Host {
	return &Host{Fabrics: FabricsDevice, Dev: "/dev", Sysfs: Sysfs{Root: DefaultSysfs}}
}

// SupportedOptions returns the option names the kernel's nvme-fabrics
// accepts (reading /dev/nvme-fabrics without a controller lists them: the
// kernel's match table). Use it to feature-detect dhchap_secret and tls.
func (h *Host) SupportedOptions() (map[string]bool, error) {
	b, err := os.ReadFile(h.Fabrics)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w (try: modprobe nvme-fabrics)", h.Fabrics, err)
	}
	return parseSupportedOptions(string(b)), nil
}

// Connect creates a controller with o and returns it as sysfs shows it
// right after creation. The kernel connects synchronously: on success the
// admin and I/O queues are up (namespaces may appear a moment later; see
// WaitPaths).
func (h *Host) Connect(o Options) (Controller, error) {
	if err := o.Validate(); err != nil {
		return Controller{}, err
	}
	if o.DHCHAPSecret != "" || o.TLS {
		if sup, err := h.SupportedOptions(); err == nil {
			if o.DHCHAPSecret != "" && !sup["dhchap_secret"] {
				return Controller{}, fmt.Errorf("connect %s: dhchap_secret: %w (needs NVME_HOST_AUTH)", o.Redacted(), ErrNotSupported)
			}
			if o.TLS && !sup["tls"] {
				return Controller{}, fmt.Errorf("connect %s: tls: %w (needs NVME_TCP_TLS)", o.Redacted(), ErrNotSupported)
			}
		}
	}
	f, err := os.OpenFile(h.Fabrics, os.O_RDWR, 0)
	if err != nil {
		return Controller{}, fmt.Errorf("connect: %w (try: modprobe nvme-%s)", err, o.Transport)
	}
	defer f.Close()
	if _, err := f.Write([]byte(o.Reveal())); err != nil {
		return Controller{}, connectError(o, err)
	}
	buf := make([]byte, 256)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Controller{}, fmt.Errorf("connect %s: read reply: %w", o.Redacted(), err)
	}
	inst, cntlid, err := parseConnectReply(string(buf[:n]))
	if err != nil {
		return Controller{}, fmt.Errorf("connect %s: %w", o.Redacted(), err)
	}
	name := "nvme" + strconv.Itoa(inst)
	c, err := h.Sysfs.Controller(name)
	if err != nil {
		// Created, but sysfs not readable: report what we know.
		return Controller{Name: name, Instance: inst, CntlID: cntlid, SubsystemNQN: o.NQN}, nil
	}
	return c, nil
}

func connectError(o Options, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("connect %s: %w", o.Redacted(), classifyConnectErrno(err))
}

// Disconnect deletes a controller ("nvme3") by writing to its
// delete_controller attribute. A controller that no longer exists is not
// an error. The kernel removes it asynchronously only for the last steps;
// the name may linger in sysfs for a moment.
func (h *Host) Disconnect(name string) error {
	if !ctrlRe.MatchString(name) {
		return fmt.Errorf("disconnect %q: not an nvme controller name", name)
	}
	p := filepath.Join(h.Sysfs.Root, "class", "nvme", name, "delete_controller")
	err := os.WriteFile(p, []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("disconnect %s: %w", name, err)
	}
	return nil
}

// SetTimeouts changes the reconnect_delay, ctrl_loss_tmo and
// fast_io_fail_tmo of a live controller through sysfs (keep_alive_tmo is
// fixed at connect time). reconnect_delay is written first because the
// kernel derives the number of reconnect attempts from it.
func (h *Host) SetTimeouts(name string, t Timeouts) error {
	if !ctrlRe.MatchString(name) {
		return fmt.Errorf("set timeouts of %q: not an nvme controller name", name)
	}
	if err := t.Validate(); err != nil {
		return err
	}
	dir := filepath.Join(h.Sysfs.Root, "class", "nvme", name)
	for _, a := range []struct {
		attr string
		v    int
	}{{"reconnect_delay", t.ReconnectDelay}, {"ctrl_loss_tmo", t.CtrlLoss}, {"fast_io_fail_tmo", t.FastIOFail}} {
		if err := os.WriteFile(filepath.Join(dir, a.attr), []byte(strconv.Itoa(a.v)), 0); err != nil {
			return fmt.Errorf("set %s of %s to %d: %w", a.attr, name, a.v, err)
		}
	}
	return nil
}

// Rekey changes one DH-HMAC-CHAP secret of controller name through sysfs
// (attr AttrDHCHAPSecret or AttrDHCHAPCtrlSecret, NVME_HOST_AUTH; 6.0+).
// The kernel keeps the new secret for every later reconnect and
// re-authenticates the live controller at once, in the background: its
// admin queue, then every I/O queue, with I/O flowing meanwhile. The
// other side must know the new key first: the target checks the host's
// answer against the host entry's dhchap_key (configfs, read again at each
// re-authentication) and answers with its dhchap_ctrl_key; a failed
// re-authentication makes nvmet end the controller (fatal error) and the
// host reconnect, which also fails until the keys agree. So change the
// target's host entry first, then the host, one secret at a time: a
// write re-authenticates with the pair the kernel has at that moment. The
// kernel refuses (EINVAL) a controller connected without a secret of that
// kind. The secret is never in the error.
func (h *Host) Rekey(name, attr string, secret SecretText) error {
	if !ctrlRe.MatchString(name) {
		return fmt.Errorf("rekey %q: not an nvme controller name", name)
	}
	if attr != AttrDHCHAPSecret && attr != AttrDHCHAPCtrlSecret {
		return fmt.Errorf("rekey %s: %q is no DH-HMAC-CHAP secret attribute", name, attr)
	}
	if _, err := ParseSecret(secret.Reveal()); err != nil {
		return fmt.Errorf("rekey %s: %s: %w", name, attr, err)
	}
	p := filepath.Join(h.Sysfs.Root, "class", "nvme", name, attr)
	if err := os.WriteFile(p, []byte(secret.Reveal()), 0); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path only; never the value
		}
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rekey %s: no %s attribute (needs NVME_HOST_AUTH): %w", name, attr, ErrNotSupported)
		}
		return fmt.Errorf("rekey %s: write %s: %w (the kernel refuses a controller connected without that kind of secret)", name, attr, err)
	}
	return nil
}

// WaitPaths waits until controller name shows at least n namespace paths
// whose head block devices exist in /dev (sysfs shows a namespace a moment
// before devtmpfs has its node), or ctx ends, and returns the controller.
func (h *Host) WaitPaths(ctx context.Context, name string, n int) (Controller, error) {
	for {
		c, err := h.Sysfs.Controller(name)
		if err == nil && len(c.Paths) >= n && h.headsExist(c) {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("controller %s: waiting for %d namespace(s): %w", name, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (h *Host) headsExist(c Controller) bool {
	for _, p := range c.Paths {
		if _, err := os.Stat(filepath.Join(h.Dev, p.Head)); err != nil {
			return false
		}
	}
	return true
}

// Discover connects a discovery controller with o (Discovery and the
// discovery NQN are forced; DuplicateConnect is implied by the kernel),
// reads the discovery log page (0x70) and disconnects. The log is read
// until two reads agree on GENCTR, as the spec asks.
func (h *Host) Discover(o Options) (DiscoveryLog, error) {
	o.NQN, o.Discovery = DiscoveryNQN, true
	o.Timeouts = nil
	c, err := h.Connect(o)
	if err != nil {
		return DiscoveryLog{}, fmt.Errorf("discover: %w", err)
	}
	defer h.Disconnect(c.Name)
	return h.ReadDiscoveryLog(c.Name)
}

// ReadDiscoveryLog reads the discovery log page from a connected discovery
// controller ("nvme3").
func (h *Host) ReadDiscoveryLog(name string) (DiscoveryLog, error) {
	dev := filepath.Join(h.Dev, name)
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return DiscoveryLog{}, fmt.Errorf("discovery log: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	for try := 0; try < 5; try++ {
		hdr := make([]byte, DiscoveryHeaderSize)
		if err := nvmesys.GetLogPage(fd, nvmesys.LogDiscovery, 0, hdr); err != nil {
			return DiscoveryLog{}, fmt.Errorf("discovery log %s: %w", dev, err)
		}
		gen, n, _, _ := discoveryHeader(hdr)
		if n > maxDiscoveryRecords {
			return DiscoveryLog{}, fmt.Errorf("discovery log %s: %d records, at most %d accepted", dev, n, maxDiscoveryRecords)
		}
		full := make([]byte, DiscoveryHeaderSize+int(n)*DiscoveryEntrySize)
		if err := nvmesys.GetLogPage(fd, nvmesys.LogDiscovery, 0, full); err != nil {
			return DiscoveryLog{}, fmt.Errorf("discovery log %s: %w", dev, err)
		}
		l, err := ParseDiscoveryLog(full)
		if errors.Is(err, ErrTruncated) {
			continue // grew between the two reads
		}
		if err != nil {
			return DiscoveryLog{}, fmt.Errorf("discovery log %s: %w", dev, err)
		}
		if l.GenCtr == gen {
			return l, nil
		}
	}
	return DiscoveryLog{}, fmt.Errorf("discovery log %s: changed on every read (GENCTR unstable)", dev)
}
