package nvmet

import (
	"os"
	"path/filepath"
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
