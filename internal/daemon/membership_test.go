package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/config"
)

func clusterDaemon(t *testing.T, name string) (*Daemon, http.Handler) {
	dir := t.TempDir()
	c := config.Default()
	c.NodeName = name
	c.StateDir = filepath.Join(dir, "state")
	c.APISocket = filepath.Join(dir, "run/api.sock")
	c.Cluster.Address = "127.0.0.1"
	c.Cluster.PeerPort, c.Cluster.ClientPort, c.Cluster.JoinPort = etcdtest.FreePort(t), etcdtest.FreePort(t), etcdtest.FreePort(t)
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

// twoNodes is a cluster of daemons n1 (init) and n2 (joined).
func twoNodes(t *testing.T) (d1 *Daemon, h1 http.Handler, d2 *Daemon, h2 http.Handler) {
	d1, h1 = clusterDaemon(t, "n1")
	d2, h2 = clusterDaemon(t, "n2")
	call(t, h1, "POST", "/v1/cluster/init", api.ClusterInitRequest{Name: "c1"}, 200, nil)
	var tok api.TokenReply
	call(t, h1, "POST", "/v1/cluster/tokens", api.TokenRequest{TTLSeconds: 600}, 200, &tok)
	call(t, h2, "POST", "/v1/cluster/join", api.JoinRequest{Address: fmt.Sprintf("127.0.0.1:%d", d1.opts.Config.Cluster.JoinPort), Token: tok.Token}, 200, nil)
	return d1, h1, d2, h2
}

// TestClusterVolumeAPI: in a cluster the volume API answers from etcd on
// any node: a record written by another node is listed with its owner
// (state unknown while the owner publishes nothing), and a create that
// cannot be placed is refused with placement's message.
func TestClusterVolumeAPI(t *testing.T) {
	d1, _, _, h2 := twoNodes(t)

	rec := model.Volume{UUID: "00000000-0000-4000-8000-000000000001", Name: "v", K: 2, M: 1, Groups: 1, Owner: "n1", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"n1", "n2", "n3"} {
		rec.Members = append(rec.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d0", UUID: fmt.Sprintf("00000000-0000-4000-8000-0000000001%02d", i)})
	}
	if err := volumes.Create(context.Background(), d1.cluster.Client(), rec); err != nil {
		t.Fatal(err)
	}
	var vs []api.Volume
	call(t, h2, "GET", "/v1/volumes", nil, 200, &vs)
	if len(vs) != 1 || vs[0].Name != "v" || vs[0].Owner != "n1" || vs[0].State != "unknown" || len(vs[0].Members) != 3 || vs[0].Members[1].Device != "n2:n2-d0" {
		t.Fatalf("volumes on n2: %+v", vs)
	}
	var in api.Volume
	call(t, h2, "GET", "/v1/volumes/"+rec.UUID, nil, 200, &in)
	if in.Name != "v" || in.NQN != "nqn.2026-11.io.fabraid:vol:"+rec.UUID {
		t.Fatalf("show on n2: %+v", in)
	}
	// Engine operations on a non-owner: TestClusterRequests.
	call(t, h2, "GET", "/v1/volumes/nope", nil, 404, nil)
	if body := call(t, h2, "POST", "/v1/volumes", api.CreateRequest{Name: "w", K: 4, M: 2}, 400, nil); !strings.Contains(body, "no placement") || !strings.Contains(body, "4+2 needs 3 nodes") {
		t.Errorf("create without free drives: %s", body)
	}
	if body := call(t, h2, "POST", "/v1/volumes", api.CreateRequest{Name: "w", K: 2, M: 1, Drives: []string{"/dev/vda"}}, 400, nil); !strings.Contains(body, "--drives") {
		t.Errorf("create with --drives in a cluster: %s", body)
	}
}
