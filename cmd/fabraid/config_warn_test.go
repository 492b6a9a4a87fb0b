package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigUnknownKeyWarns: a key this version does not know (a newer
// release's, after a downgrade) is a warning on stderr naming the file,
// line and key, and the known keys still apply: the user exit answers with
// the configured exclusive mode instead of failing.
func TestConfigUnknownKeyWarns(t *testing.T) {
	d := startFakeDaemon(t)
	p := filepath.Join(t.TempDir(), "f.conf")
	os.WriteFile(p, []byte("api_socket = "+d.sock+"\nfuture_key = 1\nnsd_discovery = exclusive\n"), 0o644)
	out, stderr, code := runCLI(t, "nsd", "devices", "--user-exit", "--config", p)
	if out != "" || code != 0 {
		t.Errorf("exclusive with an unknown key: %q exit %d, want nothing and 0", out, code)
	}
	if !strings.Contains(stderr, "fabraid: warning: "+p+":2: future_key: unknown key, ignored") {
		t.Errorf("no warning naming the key: %q", stderr)
	}
}
