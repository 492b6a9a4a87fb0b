package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
)

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func clusterDaemon(t *testing.T, name string) (*Daemon, http.Handler) {
	dir := t.TempDir()
	c := config.Default()
	c.NodeName = name
	c.StateDir = filepath.Join(dir, "state")
	c.APISocket = filepath.Join(dir, "run/api.sock")
	c.Cluster.Address = "127.0.0.1"
	c.Cluster.PeerPort, c.Cluster.ClientPort, c.Cluster.JoinPort = freePort(t), freePort(t), freePort(t)
	c.Cluster.LeaseTTL = 2
	d, err := New(Options{Config: c, Version: "test", HostDir: filepath.Join(dir, "nvme"), EngineBinary: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.cluster.Close)
	return d, d.Handler()
}

func call(t *testing.T, h http.Handler, method, path string, body any, code int, out any) string {
	t.Helper()
	b, _ := json.Marshal(body)
	if body == nil {
		b = nil
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, bytes.NewReader(b)))
	if rec.Code != code {
		t.Fatalf("%s %s: %d %s, want %d", method, path, rec.Code, rec.Body, code)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, rec.Body)
		}
	}
	return rec.Body.String()
}

// TestClusterAPI drives init, token and join through two daemons' APIs
// (real embedded etcd on loopback).
func TestClusterAPI(t *testing.T) {
	d1, h1 := clusterDaemon(t, "n1")
	_, h2 := clusterDaemon(t, "n2")
	if body := call(t, h1, "GET", "/v1/cluster", nil, 409, nil); !strings.Contains(body, "in no cluster") {
		t.Errorf("status before init: %s", body)
	}
	call(t, h1, "POST", "/v1/cluster/init", api.ClusterInitRequest{Name: "c1"}, 200, nil)
	call(t, h1, "POST", "/v1/cluster/init", api.ClusterInitRequest{}, 409, nil)
	var tok api.TokenReply
	call(t, h1, "POST", "/v1/cluster/tokens", api.TokenRequest{TTLSeconds: 600}, 200, &tok)
	addr := fmt.Sprintf("127.0.0.1:%d", d1.opts.Config.Cluster.JoinPort)
	bad := tok.Token[:len("fbj1.")+13] + strings.Repeat("0", 32) + tok.Token[len("fbj1.")+13+32:]
	if body := call(t, h2, "POST", "/v1/cluster/join", api.JoinRequest{Address: addr, Token: bad}, 403, nil); !strings.Contains(body, "wrong join token secret") {
		t.Errorf("join with a wrong secret: %s", body)
	}
	call(t, h2, "POST", "/v1/cluster/join", api.JoinRequest{Address: addr, Token: tok.Token}, 200, nil)
	var st api.ClusterStatus
	call(t, h2, "GET", "/v1/cluster", nil, 200, &st)
	if st.Cluster != "c1" || len(st.Members) != 2 || !st.Healthy || len(st.Nodes) != 2 || !st.Nodes[1].Alive || st.Nodes[1].HostNQN == "" {
		t.Fatalf("status: %+v", st)
	}
	if body := call(t, h1, "DELETE", "/v1/cluster/nodes/n2", nil, 409, nil); !strings.Contains(body, "node is alive: n2") {
		t.Errorf("remove of a live node: %s", body)
	}
	if body := call(t, h2, "POST", "/v1/cluster/leave", api.LeaveRequest{}, 409, nil); !strings.Contains(body, "2 voting etcd members") {
		t.Errorf("leave of one of two members: %s", body)
	}
}
