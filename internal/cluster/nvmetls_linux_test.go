//go:build linux

package cluster_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/nvmet"
)

// nvmeTLSFile, in a guest, holds the nvme_tls setting of its fabraidd
// (withNVMeTLS puts it there); such a guest runs tlshd before fabraidd.
const nvmeTLSFile = "/etc/fabraid-test-nvme-tls"

// withNVMeTLS gives guests trixie's tlshd, the kernel's TLS modules and
// nvmeTLSFile with mode. Host side; in the guest it returns guests.
func withNVMeTLS(t *testing.T, guests []vmtest.GuestConfig, mode string) []vmtest.GuestConfig {
	if vmtest.InGuest() {
		return guests
	}
	f := filepath.Join(t.TempDir(), "nvme-tls")
	if err := os.WriteFile(f, []byte(mode), 0o644); err != nil {
		t.Fatal(err)
	}
	tlshd := vmtest.TLSHD(t)
	for i := range guests {
		files := maps.Clone(guests[i].Files)
		maps.Copy(files, tlshd)
		files[nvmeTLSFile] = f
		guests[i].Files = files
		guests[i].Modules = append(slices.Clone(guests[i].Modules), vmtest.TLSModules(vmtest.Kernel612)...)
	}
	return guests
}

// guestNVMeTLS is the nvme_tls line of this guest's fabraidd config, ""
// without nvmeTLSFile; with it, tlshd runs when it returns.
func guestNVMeTLS(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(nvmeTLSFile)
	if err != nil {
		return ""
	}
	vmtest.StartTLSHD(t)
	return "nvme_tls = " + strings.TrimSpace(string(b)) + "\n"
}

// checkVolumePortTLS, on a volume's owner under nvme_tls (nvmeTLSFile),
// checks that its volume port takes TLS 1.3 as the setting asks (addr_treq
// "required" under required, "not required" under on).
func checkVolumePortTLS(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(nvmeTLSFile)
	if err != nil {
		return
	}
	treq := map[string]string{"required": "required", "on": "not required"}[strings.TrimSpace(string(b))]
	port := filepath.Join(nvmet.DefaultRoot, "ports", "18000")
	for attr, want := range map[string]string{"addr_tsas": "tls1.3", "addr_treq": treq} {
		got, err := os.ReadFile(filepath.Join(port, attr))
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(got)), want) {
			t.Fatalf("volume port %d %s = %q (%v), want %s", volmgr.ExportPortID, attr, got, err, want)
		}
	}
	t.Logf("volume port %d: addr_tsas tls1.3, addr_treq %s", volmgr.ExportPortID, treq)
}

// checkConsumerTLS, on a consumer under nvme_tls (nvmeTLSFile), checks
// that every controller of this host to the subsystem nqn uses a TLS key
// (sysfs tls_key) and logs which.
func checkConsumerTLS(t *testing.T, nqn string) {
	t.Helper()
	if _, err := os.Stat(nvmeTLSFile); err != nil {
		return
	}
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*")
	n := 0
	for _, c := range ctrls {
		sub, _ := os.ReadFile(filepath.Join(c, "subsysnqn"))
		if strings.TrimSpace(string(sub)) != nqn {
			continue
		}
		n++
		key, err := os.ReadFile(filepath.Join(c, "tls_key"))
		if k := strings.TrimSpace(string(key)); err != nil || k == "" || strings.Trim(k, "0") == "" {
			t.Fatalf("%s to %s: tls_key %q (%v): not TLS", filepath.Base(c), nqn, key, err)
		}
		addr, _ := os.ReadFile(filepath.Join(c, "address"))
		t.Logf("%s to %s (%s): TLS with key %s", filepath.Base(c), nqn, strings.TrimSpace(string(addr)), strings.TrimSpace(string(key)))
	}
	if n == 0 {
		t.Fatalf("no controller to %s", nqn)
	}
}
