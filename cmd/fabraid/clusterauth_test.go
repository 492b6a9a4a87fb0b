package main

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
)

// fakeAuthAPI answers POST path with status and body on a unix socket and
// counts the requests.
func fakeAuthAPI(t *testing.T, path string, status int, body any) (string, *int) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	n := new(int)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		*n++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(body)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock, n
}

// TestClusterEnableRBAC: the command asks fabraidd (POST
// /v1/cluster/rbac) and says RBAC is on; fabraidd's refusal on a
// client-only node is printed as it is and exits non-zero.
func TestClusterEnableRBAC(t *testing.T) {
	sock, n := fakeAuthAPI(t, "/v1/cluster/rbac", 200, map[string]bool{"ok": true})
	out, stderr, code := runCLIIn(t, strings.NewReader(""), "cluster", "enable-rbac", "--socket", sock)
	if code != 0 || *n != 1 || !strings.Contains(out, "etcd RBAC is on") {
		t.Fatalf("exit %d, %d requests, out %q, stderr %q", code, *n, out, stderr)
	}
	const refusal = "this node is a client-only node (no etcd member): run fabraid cluster enable-rbac on an etcd member"
	sock, _ = fakeAuthAPI(t, "/v1/cluster/rbac", 409, map[string]string{"error": refusal})
	if _, stderr, code := runCLIIn(t, strings.NewReader(""), "cluster", "enable-rbac", "--socket", sock); code == 0 || !strings.Contains(stderr, refusal) {
		t.Fatalf("client-only node: exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code := runCLIIn(t, strings.NewReader(""), "cluster", "enable-rbac", "extra", "--socket", sock); code == 0 || !strings.Contains(stderr, "unknown command") && !strings.Contains(stderr, "accepts 0 arg") {
		t.Fatalf("an argument: exit %d, stderr %q", code, stderr)
	}
}

// TestClusterRotateKeys: the command asks fabraidd (POST
// /v1/cluster/rotate-keys) and reports what was rotated and how long the
// target took to present it.
func TestClusterRotateKeys(t *testing.T) {
	sock, n := fakeAuthAPI(t, "/v1/cluster/rotate-keys", 200, api.RotateKeysReply{Rotated: []string{"controller"}, Seconds: 1.5})
	out, stderr, code := runCLIIn(t, strings.NewReader(""), "cluster", "rotate-keys", "--socket", sock)
	if code != 0 || *n != 1 || !strings.Contains(out, "rotated the [controller] secret") || !strings.Contains(out, "after 1.5 s") {
		t.Fatalf("exit %d, %d requests, out %q, stderr %q", code, *n, out, stderr)
	}
	sock, _ = fakeAuthAPI(t, "/v1/cluster/rotate-keys", 409, map[string]string{"error": "not in a cluster"})
	if _, stderr, code := runCLIIn(t, strings.NewReader(""), "cluster", "rotate-keys", "--socket", sock); code == 0 || !strings.Contains(stderr, "not in a cluster") {
		t.Fatalf("refused: exit %d, stderr %q", code, stderr)
	}
}

// TestClusterRotateHostKey: --host reports the host secret's rotation and
// names the nodes that had not acknowledged it.
func TestClusterRotateHostKey(t *testing.T) {
	sock, n := fakeAuthAPI(t, "/v1/cluster/rotate-keys", 200, api.RotateKeysReply{Rotated: []string{"host"}, Seconds: 2.5, NotAcknowledged: []string{"n3"}})
	out, stderr, code := runCLIIn(t, strings.NewReader(""), "cluster", "rotate-keys", "--host", "--socket", sock)
	if code != 0 || *n != 1 || !strings.Contains(out, "rotated the host secret") || !strings.Contains(out, "after 2.5 s") || !strings.Contains(out, "not acknowledged by [n3]") {
		t.Fatalf("exit %d, %d requests, out %q, stderr %q", code, *n, out, stderr)
	}
}
