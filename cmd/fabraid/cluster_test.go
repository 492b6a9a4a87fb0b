package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
			{Node: model.Node{Name: "n2", Domain: "n2", ClusterAddress: "10.0.0.2"}},
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
	for _, want := range []string{"cluster c1 (embedded etcd): UNHEALTHY, leader n1", "n1  ", "leader", "down: context deadline exceeded", "learner", "rack1", "S1(3.0TiB)", "DEAD",
		"VOLUME", "4+2    n1     rebuilding (resync 42%) resynced 4.0MiB  3@n2(unreachable) 4@n2(rebuilding)",
		"0f6c5a52-0000-4000-8000-000000000002  2x2+1  n2     unknown"} {
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
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q api.JoinRequest
		if r.URL.Path != "/v1/cluster/join" || json.NewDecoder(r.Body).Decode(&q) != nil {
			http.NotFound(w, r)
			return
		}
		got = append(got, q.Address+" "+q.Token)
		w.Write([]byte("{}"))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

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
