//go:build linux

package nvmetls_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/internal/nvmetest"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"golang.org/x/sys/unix"
)

var (
	tlsHost = nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:71717171-0000-4000-8000-000000000071", ID: "71717171-0000-4000-8000-000000000071"}
	tlsSub  = "nqn.2026-11.io.fabraid:drive:tls"
)

// TestIntegrationTLS runs nvmet and nvme-tcp in one 6.12 guest over
// loopback with tlshd (Debian trixie's ktls-utils 1.0.0) doing the
// handshakes: a port that requires TLS 1.3, a PSK derived with this
// package in the .nvme keyring; the host connects with tls, writes and
// reads back 1 MiB; a connect without TLS and one with a wrong PSK (the
// same identity in another keyring, named with keyring=) are refused,
// and the test logs the errors, tlshd's and the kernel's messages; last,
// with addr_treq "not required" the port also takes a host without TLS.
func TestIntegrationTLS(t *testing.T) { runTLS(t, vmtest.Kernel612, "a") }

// TestIntegrationTLSKernel7 is TestIntegrationTLS on Debian sid's 7.x
// kernel (NVME_TCP_TLS and NVME_TARGET_TCP_TLS built in or as modules),
// with the same tlshd.
func TestIntegrationTLSKernel7(t *testing.T) {
	vmtest.RequireCaps(t, vmtest.Kernel7, "NvmetTCPTLS", "NvmeTCPTLS")
	runTLS(t, vmtest.Kernel7, "a7")
}

func runTLS(t *testing.T, kernel, name string) {
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{
			Name: name, Kernel: kernel,
			Modules: append(nvmetest.Modules(true, true, false), vmtest.TLSModules(kernel)...),
			Disks:   []vmtest.Disk{{Size: 16 << 20}},
			Files:   vmtest.TLSHD(t),
		}},
		Timeout: 150 * time.Second,
	}, func(t *testing.T, g *vmtest.Env) {
		tlsGuest(t, g)
	})
}

func tlsGuest(t *testing.T, g *vmtest.Env) {
	klog := &kmsg{seen: map[string]bool{}}
	vmtest.StartTLSHD(t)

	// The PSK: configured, derived for the pair, into .nvme.
	psk, d := newPSK(t)
	ring, err := nvmetls.Keyring()
	if err != nil {
		t.Fatal(err)
	}
	key, err := nvmetls.Insert(0, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("configured PSK %v; %v as key %x in keyring %s (%x)", psk, d, key, nvmetls.KeyringName, ring)

	// The target: a port that requires TLS.
	tg := nvmet.New("")
	feat, err := nvmet.Probe(tg.Root, "/sys/module", tg.Own)
	if err != nil {
		t.Fatal(err)
	}
	if err := feat.RequireTLS(); err != nil {
		t.Fatal(err)
	}
	spec := func(optional bool) nvmet.Spec {
		return nvmet.Spec{
			Hosts: []nvmet.Host{{NQN: tlsHost.NQN}},
			Subsystems: []nvmet.Subsystem{{NQN: tlsSub, AllowedHosts: []string{tlsHost.NQN},
				Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: g.Disks[0]}}}},
			Ports: []nvmet.Port{{ID: 18011, Transport: nvmet.TCP, Address: "127.0.0.1", ServiceID: "4420",
				TLS: true, TLSOptional: optional, Subsystems: []string{tlsSub}}},
		}
	}
	if done, err := tg.Apply(spec(false)); err != nil {
		t.Fatalf("apply: %v\ndone:\n%s", err, done)
	}
	st, err := tg.Read()
	if err != nil || len(st.Ports) != 1 || !st.Ports[0].TLS || st.Ports[0].TLSOptional {
		t.Fatalf("port as read back: %+v, %v", st.Ports, err)
	}
	t.Logf("nvmet port 18011 on 127.0.0.1:4420: addr_tsas tls1.3, addr_treq required")

	h := nvmf.NewHost()
	member, _ := nvmf.Profile(nvmf.ProfileMember)
	opts := func(tls bool) nvmf.Options {
		return nvmf.Options{Transport: nvmf.TCP, Address: "127.0.0.1", ServiceID: "4420", NQN: tlsSub,
			HostNQN: tlsHost.NQN, HostID: tlsHost.ID, Timeouts: &member, TLS: tls}
	}

	// Without TLS: refused.
	start := time.Now()
	if c, err := h.Connect(opts(false)); err == nil {
		t.Errorf("connect without TLS to a TLS-required port succeeded: %s", c.Name)
		h.Disconnect(c.Name)
	} else {
		t.Logf("connect without TLS refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	klog.log(t, "without TLS")

	// With TLS and the right PSK: data goes through.
	start = time.Now()
	c, err := h.Connect(opts(true))
	if err != nil {
		klog.log(t, "TLS connect")
		t.Fatalf("connect with TLS: %v", err)
	}
	t.Logf("connected %s with TLS in %v", c.Name, time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if c, err = h.WaitPaths(ctx, c.Name, 1); err != nil {
		t.Fatal(err)
	}
	dev := "/dev/" + c.Paths[0].Head
	if tk, err := os.ReadFile("/sys/class/nvme/" + c.Name + "/tls_key"); err == nil {
		serial, _ := strconv.ParseInt(strings.TrimSpace(string(tk)), 16, 64)
		t.Logf("%s tls_key %s (the PSK inserted: %x)", c.Name, strings.TrimSpace(string(tk)), key)
		if int(serial) != key {
			t.Errorf("controller uses key %x, want %x", serial, key)
		}
	}
	const n = 1 << 20
	start = time.Now()
	if err := nvmetest.WritePattern(dev, 7, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := nvmetest.CheckPattern(dev, 7, 0, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote and read back %d bytes through %s over TLS in %v", n, dev, time.Since(start).Round(time.Millisecond))
	if err := nvmetest.CheckPattern(g.Disks[0], 7, 0, n); err != nil {
		t.Fatalf("the exported disk does not hold the data: %v", err)
	}
	klog.log(t, "TLS connect")
	if err := h.Disconnect(c.Name); err != nil {
		t.Error(err)
	}

	// A wrong PSK under the right identity, in a keyring of its own.
	_, wrong := newPSK(t)
	wring, err := nvmetls.NewKeyring("fabraid-test-wrong")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nvmetls.Insert(wring, wrong); err != nil {
		t.Fatal(err)
	}
	o := opts(true)
	o.Keyring = wring
	start = time.Now()
	if c, err := h.Connect(o); err == nil {
		t.Errorf("connect with a wrong PSK succeeded: %s", c.Name)
		h.Disconnect(c.Name)
	} else {
		t.Logf("connect with a wrong PSK (keyring %d) refused after %v: %v", wring, time.Since(start).Round(time.Millisecond), err)
	}
	klog.log(t, "wrong PSK")

	// addr_treq "not required": the same port takes hosts without TLS.
	if done, err := tg.Apply(spec(true)); err != nil {
		t.Fatalf("apply TLS optional: %v\ndone:\n%s", err, done)
	}
	if c, err := h.Connect(opts(false)); err != nil {
		t.Errorf("connect without TLS to a TLS-optional port: %v", err)
	} else {
		t.Logf("addr_treq not required: connect without TLS accepted (%s)", c.Name)
		h.Disconnect(c.Name)
	}
	klog.log(t, "TLS optional")
}

// newPSK makes a configured PSK and derives it for tlsHost and tlsSub.
func newPSK(t *testing.T) (nvmetls.PSK, nvmetls.Derived) {
	t.Helper()
	psk, err := nvmetls.GeneratePSK(32)
	if err != nil {
		t.Fatal(err)
	}
	d, err := psk.Derive(tlsHost.NQN, tlsSub)
	if err != nil {
		t.Fatal(err)
	}
	return psk, d
}

// kmsg prints the kernel's NVMe and TLS messages once each.
type kmsg struct{ seen map[string]bool }

func (k *kmsg) log(t *testing.T, when string) {
	t.Helper()
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Logf("open /dev/kmsg: %v", err)
		return
	}
	defer unix.Close(fd)
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EPIPE {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		rec := string(buf[:n])
		head, msg, _ := strings.Cut(rec, ";")
		f := strings.Split(head, ",")
		if len(f) < 2 || k.seen[f[1]] {
			continue
		}
		k.seen[f[1]] = true
		msg, _, _ = strings.Cut(msg, "\n")
		if l := strings.ToLower(msg); strings.Contains(l, "nvme") || strings.Contains(l, "tls") || strings.Contains(l, "handshake") {
			t.Logf("kernel (%s): %s", when, msg)
		}
	}
}
