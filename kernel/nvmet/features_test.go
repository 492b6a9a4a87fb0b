package nvmet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostAuth: on a plain directory (no configfs, so no attributes) the
// throw-away host entry has no dhchap_key and is removed again; an entry
// that exists already is refused and left alone.
func TestHostAuth(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "hosts"), 0o755); err != nil {
		t.Fatal(err)
	}
	ok, err := HostAuth(root, "nqn.test:doctor")
	if err != nil || ok {
		t.Fatalf("HostAuth = %v, %v; want false, nil", ok, err)
	}
	if _, err := os.Stat(filepath.Join(root, "hosts", "nqn.test:doctor")); !os.IsNotExist(err) {
		t.Errorf("probe entry left behind: %v", err)
	}
	os.Mkdir(filepath.Join(root, "hosts", "nqn.test:taken"), 0o755)
	if _, err := HostAuth(root, "nqn.test:taken"); err == nil {
		t.Error("an existing host entry was probed")
	}
	if _, err := os.Stat(filepath.Join(root, "hosts", "nqn.test:taken")); err != nil {
		t.Errorf("existing host entry removed: %v", err)
	}
}

// TestRequireTLS: the error names the kernel option.
func TestRequireTLS(t *testing.T) {
	if err := (Features{TLS: true}).RequireTLS(); err != nil {
		t.Fatal(err)
	}
	err := Features{}.RequireTLS()
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "NVME_TARGET_TCP_TLS") {
		t.Fatalf("RequireTLS = %v", err)
	}
	e := newError("write", "ports/1/addr_tsas", "tls1.3", syscall.EINVAL)
	if !strings.Contains(e.Error(), "NVME_TARGET_TCP_TLS") {
		t.Errorf("EINVAL on addr_tsas: %v", e)
	}
}
