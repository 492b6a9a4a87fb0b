package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
)

// fakeDaemon answers GET /v1/volumes on a unix socket with a list the test
// sets: the daemon's API contract, for the CLI paths that need no kernel.
type fakeDaemon struct {
	mu   sync.Mutex
	vols []api.Volume
	sock string
}

func startFakeDaemon(t *testing.T, vols ...api.Volume) *fakeDaemon {
	t.Helper()
	d := &fakeDaemon{vols: vols, sock: filepath.Join(t.TempDir(), "api.sock")}
	l, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/volumes" {
			http.NotFound(w, r)
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		json.NewEncoder(w).Encode(append([]api.Volume{}, d.vols...))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return d
}

// runCLI runs the CLI in-process and returns stdout, stderr and the exit
// code main would use.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCLIIn(t, strings.NewReader(""), args...)
}

// runCLIIn is runCLI with stdin as standard input.
func runCLIIn(t *testing.T, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(stdin)
	root.SetArgs(args)
	err := root.Execute()
	code := 0
	if err != nil {
		code = 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		errb.WriteString(err.Error())
	}
	t.Logf("fabraid %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out.String(), errb.String())
	return out.String(), errb.String(), code
}

// TestWaitNotUp: fabraid wait gives up with exit 5 and names each volume
// and why; with nothing to wait for it returns 0. (The volume coming up
// is tested in the guest, TestIntegrationScale.)
func TestWaitNotUp(t *testing.T) {
	d := startFakeDaemon(t, api.Volume{Name: "vol0", State: "stopped"},
		api.Volume{Name: "vol1", State: "optimal", Device: "/dev/nvme99n9"},
		api.Volume{Name: "vol2", State: "waiting", Error: "cannot start: 1 of 3 members present, 2 needed"})
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--volumes", "vol0"}, []string{"vol0: no consumer device (state stopped)"}},
		{nil, []string{"vol0: no consumer device", "vol1: nvme99n9 is not in /proc/partitions"}},
		{[]string{"--volumes", "nope,vol1"}, []string{"nope: no such volume", "vol1: nvme99n9"}},
		{[]string{"--volumes", "vol2"}, []string{"vol2: no consumer device (state waiting): cannot start: 1 of 3 members present, 2 needed"}},
		{[]string{"--socket", filepath.Join(t.TempDir(), "none.sock")}, []string{"fabraidd is not running"}},
	} {
		// The timeout must leave room for at least one answer from the fake
		// daemon on a loaded host, or the reason is "did not answer"; the
		// cases run in parallel so the test still takes one timeout.
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			args := append([]string{"wait", "--socket", d.sock, "--timeout", "3s"}, tc.args...)
			_, stderr, code := runCLI(t, args...)
			if code != 5 || !strings.Contains(stderr, "timed out after") {
				t.Errorf("%v: exit %d %q, want 5 and a timeout message", tc.args, code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("%v: %q does not say %q", tc.args, stderr, w)
				}
			}
		})
	}
	empty := startFakeDaemon(t)
	if _, _, code := runCLI(t, "wait", "--socket", empty.sock, "--timeout", "10s"); code != 0 {
		t.Errorf("wait with no volumes: exit %d, want 0", code)
	}
	if _, _, code := runCLI(t, "wait", "--socket", empty.sock, "--timeout", "0s"); code != 2 {
		t.Errorf("wait --timeout 0: exit %d, want 2", code)
	}
}

// TestNsdDevicesUserExit: the exit status is the configured nsd_discovery
// (1 merge, 0 exclusive); volumes not listable print nothing on stdout;
// no daemon means no lines and 1, so Scale's own discovery still runs.
func TestNsdDevicesUserExit(t *testing.T) {
	d := startFakeDaemon(t, api.Volume{Name: "vol0", State: "stopped"},
		api.Volume{Name: "vol1", Device: "/dev/nvme0c1n1"})
	dir := t.TempDir()
	conf := func(extra string) string {
		p := filepath.Join(dir, "f.conf")
		os.WriteFile(p, []byte("api_socket = "+d.sock+"\n"+extra), 0o644)
		return p
	}
	out, stderr, code := runCLI(t, "nsd", "devices", "--user-exit", "--config", conf(""))
	if out != "" || code != 1 || !strings.Contains(stderr, "vol1 not listed: consumer device /dev/nvme0c1n1 is not an NVMe head") {
		t.Errorf("merge: %q exit %d", out, code)
	}
	if out, _, code := runCLI(t, "nsd", "devices", "--user-exit", "--config", conf("nsd_discovery = exclusive\n")); out != "" || code != 0 {
		t.Errorf("exclusive: %q exit %d, want nothing and 0", out, code)
	}
	if out, _, code := runCLI(t, "nsd", "devices", "--user-exit", "--config", conf("nsd_discovery = exclusive\n"), "--socket", filepath.Join(dir, "none")); out != "" || code != 1 {
		t.Errorf("no daemon: %q exit %d, want nothing and 1", out, code)
	}
	if _, _, code := runCLI(t, "nsd", "devices", "--config", conf("")); code != 0 {
		t.Errorf("without --user-exit: exit %d, want 0", code)
	}
	if _, stderr, code := runCLI(t, "nsd", "show", "vol_x", "--config", conf("")); code != 1 || !strings.Contains(stderr, "no fabraid volume on this node maps to it") {
		t.Errorf("show unknown: exit %d %q", code, stderr)
	}
	if out, _, code := runCLI(t, "nsd", "show", "vol0", "--config", conf("")); code != 0 || !strings.Contains(out, "nsd vol0: volume vol0") {
		t.Errorf("show vol0: exit %d %q", code, out)
	}
}

// hangingLister answers its first call with vols and then never again, like
// a daemon that stops answering between two polls.
type hangingLister struct {
	vols  []api.Volume
	calls atomic.Int32
}

func (h *hangingLister) Volumes() ([]api.Volume, error) {
	if h.calls.Add(1) == 1 {
		return h.vols, nil
	}
	select {}
}

// TestWaitKeepsLastReason: a poll cut off by the deadline does not replace
// the reason the daemon gave before with "did not answer".
func TestWaitKeepsLastReason(t *testing.T) {
	l := &hangingLister{vols: []api.Volume{{Name: "vol0", State: "stopped"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := waitUp(ctx, l, []string{"vol0"}, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "vol0: no consumer device (state stopped)") {
		t.Fatalf("waitUp = %v, want the daemon's last reason", err)
	}
}
