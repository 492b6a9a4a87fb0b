package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

func TestPrintClusterStatus(t *testing.T) {
	s := api.ClusterStatus{Cluster: "c1", Etcd: "embedded", Leader: "n1", Healthy: false,
		Members: []model.MemberStatus{
			{ID: "a1", Name: "n1", Leader: true, Healthy: true, PeerURLs: []string{"https://10.0.0.1:2380"}},
			{ID: "b2", Name: "n2", Healthy: false, Error: "context deadline exceeded"},
			{ID: "c3", Name: "n3", Learner: true, Healthy: true},
		},
		Nodes: []model.NodeStatus{
			{Node: model.Node{Name: "n1", Domain: "rack1", ClusterAddress: "10.0.0.1", Drives: []model.Drive{{ID: "S1", Size: 3 << 40}}}, Alive: true},
			{Node: model.Node{Name: "n2", Domain: "n2", ClusterAddress: "10.0.0.2", Exports: model.ExportsDHCHAP}, Drained: true,
				DownSince: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)},
			{Node: model.Node{Name: "n3", Domain: "n3", ClusterAddress: "10.0.0.3", Exports: model.ExportsRefused, ExportsWhy: "exports refused: require_auth = true and the NVMe target has no DH-HMAC-CHAP"}, Alive: true},
		},
		Volumes: []model.VolumeInfo{
			{Name: "v1", UUID: "0f6c5a52-0000-4000-8000-000000000001", K: 4, M: 2, Groups: 1, Owner: "n1", Record: "ready", State: "rebuilding",
				Task: "resync", Progress: 42, ResyncBytes: 4 << 20,
				Degraded: []model.VolumeMemberStatus{{Slot: 3, Node: "n2", Role: "failed", Failure: "unreachable"}, {Slot: 4, Node: "n2", Role: "rebuilding"}}},
			{Name: "v2", UUID: "0f6c5a52-0000-4000-8000-000000000002", K: 2, M: 1, Groups: 2, Owner: "n2", Record: "ready", State: "unknown"},
		},
	}
	var b bytes.Buffer
	printClusterStatus(&b, s)
	out := b.String()
	for _, want := range []string{"cluster c1 (embedded etcd): UNHEALTHY, leader n1", "n1  ", "leader", "down: context deadline exceeded", "learner", "rack1", "S1(3.0TiB)", "DEAD since 2026-12-05T12:00:00Z,drained",
		"VOLUME", "4+2    n1     rebuilding (resync 42%) resynced 4.0MiB  3@n2(unreachable) 4@n2(rebuilding)",
		"0f6c5a52-0000-4000-8000-000000000002  2x2+1  n2     unknown",
		"dh-hmac-chap", "REFUSED", "node n3 exports nothing (no drive serves another owner, it owns no volume): exports refused: require_auth = true"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}

func TestPrintClusterStatusNoVolumes(t *testing.T) {
	var b bytes.Buffer
	printClusterStatus(&b, api.ClusterStatus{Cluster: "c1", Healthy: true})
	if !strings.Contains(b.String(), "no volumes") {
		t.Errorf("output lacks \"no volumes\":\n%s", b.String())
	}
}

// TestClusterJoinToken: the join token comes from --token-file or, with
// --token -, from standard input, without a warning; --token TOKEN still
// works but warns that argv is visible to other users, and so does a
// token file others can read. Both flags, neither, or an empty source
// are usage errors (exit 2) that send nothing.
func TestClusterJoinToken(t *testing.T) {
	const tok = "fbj1.000000000000.00000000000000000000000000000000.0000000000000000000000000000000000000000000000000000000000000000"
	var got []string
	sock := fakeClusterAPI(t, "/v1/cluster/join", func(b []byte) any {
		var q api.JoinRequest
		json.Unmarshal(b, &q)
		got = append(got, q.Address+" "+q.Token)
		return struct{}{}
	})

	dir := t.TempDir()
	file := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	private := file("tok", "\n  "+tok+"  \nrest\n", 0o600)
	shared := file("shared", tok+"\n", 0o644)
	empty := file("empty", "\n\n", 0o600)
	const argvWarning = "visible to other users (ps, /proc/PID/cmdline)"
	for _, tc := range []struct {
		args       []string
		stdin      string
		code       int
		sent       bool
		warn, fail string
	}{
		{args: []string{"--token-file", private}, code: 0, sent: true},
		{args: []string{"--token", "-"}, stdin: tok + "\n", code: 0, sent: true},
		{args: []string{"--token", tok}, code: 0, sent: true, warn: argvWarning},
		{args: []string{"--token-file", shared}, code: 0, sent: true, warn: "readable by other users (mode 0644)"},
		{args: []string{"--token", tok, "--token-file", private}, code: 2, fail: "not both"},
		{args: nil, code: 2, fail: "--token-file FILE or --token - (standard input) is required"},
		{args: []string{"--token-file", empty}, code: 2, fail: "no join token"},
		{args: []string{"--token", "-"}, stdin: "", code: 2, fail: "standard input: no join token"},
		{args: []string{"--token-file", filepath.Join(dir, "none")}, code: 2, fail: "no such file"},
	} {
		got = nil
		out, stderr, code := runCLIIn(t, strings.NewReader(tc.stdin), append([]string{"cluster", "join", "10.0.0.1", "--socket", sock}, tc.args...)...)
		name := strings.Join(tc.args, " ")
		if code != tc.code || !strings.Contains(stderr, tc.fail) {
			t.Errorf("%s: exit %d (%s), want %d %q", name, code, stderr, tc.code, tc.fail)
		}
		if tc.sent != (len(got) == 1 && got[0] == "10.0.0.1 "+tok) {
			t.Errorf("%s: sent %q, want the token sent: %v", name, got, tc.sent)
		}
		if strings.Contains(stderr, "warning:") != (tc.warn != "") || !strings.Contains(stderr, tc.warn) {
			t.Errorf("%s: stderr %q, want warning %q", name, stderr, tc.warn)
		}
		if strings.Contains(stderr+out, tok) {
			t.Errorf("%s: the token is printed: %q %q", name, out, stderr)
		}
	}
}

// fakeClusterAPI serves path on a unix socket: handle gets each request's
// body and returns the reply. It returns the socket.
func fakeClusterAPI(t *testing.T, path string, handle func(body []byte) any) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if r.URL.Path != path || err != nil {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(handle(b))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestClusterTokenTTL: --ttl above model.MaxTokenTTL (24 h) is refused
// with exit 2 and an error that names the cap, before anything is asked
// of fabraidd; 24 h itself is asked for.
func TestClusterTokenTTL(t *testing.T) {
	var asked []int64
	sock := fakeClusterAPI(t, "/v1/cluster/tokens", func(b []byte) any {
		var q api.TokenRequest
		json.Unmarshal(b, &q)
		asked = append(asked, q.TTLSeconds)
		return api.TokenReply{Token: "fbj1.x"}
	})
	for _, tc := range []struct {
		ttl  string
		code int
		ask  int64
	}{{"24h", 0, 86400}, {"24h1s", 2, 0}, {"48h", 2, 0}, {"168h", 2, 0}, {"30s", 2, 0}} {
		asked = nil
		_, stderr, code := runCLI(t, "cluster", "token", "--socket", sock, "--ttl", tc.ttl)
		if code != tc.code || (code == 2 && !strings.Contains(stderr, "at most 24h0m0s")) {
			t.Errorf("--ttl %s: exit %d %q, want %d (naming the cap 24h0m0s when refused)", tc.ttl, code, stderr, tc.code)
		}
		if tc.ask != 0 && (len(asked) != 1 || asked[0] != tc.ask) || tc.ask == 0 && len(asked) != 0 {
			t.Errorf("--ttl %s: asked fabraidd for %v, want %d", tc.ttl, asked, tc.ask)
		}
	}
}
