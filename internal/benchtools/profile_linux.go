package benchtools

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EngineProfile writes a CPU profile of seconds of volume uuid's engine
// (its /debug/pprof over the engine's root-only socket) to path. It runs
// in the guest, while the caller drives the load.
func EngineProfile(uuid string, seconds int, path string) error {
	return SocketProfile("/run/fabraid/engine-"+uuid+".sock", seconds, path)
}

// SocketProfile writes a CPU profile of seconds of the process serving
// /debug/pprof on the unix socket sock (an engine's, or fabraidd's API
// socket) to path.
func SocketProfile(sock string, seconds int, path string) error {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get(fmt.Sprintf("http://fabraid/debug/pprof/profile?seconds=%d", seconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile over %s: %s", sock, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LogProfiles logs the top of every *.pprof in dir (go tool pprof -top),
// on the host once the guests are done, and where they are.
func LogProfiles(t testing.TB, dir string) {
	t.Helper()
	pp, _ := filepath.Glob(filepath.Join(dir, "*.pprof"))
	for _, p := range pp {
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", p).CombinedOutput()
		t.Logf("profile %s (%v):\n%s", p, err, out)
	}
	t.Logf("profiles in %s", dir)
}
