package clusterplane

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster"
	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// These tests run real embedded etcd members on loopback ports; the
// volume managers run no engine (none is started).

// testPlane is the plane of node name over a volume manager and a cluster
// membership in a temporary directory; its node is in no cluster yet.
func testPlane(t *testing.T, name string) *Plane {
	t.Helper()
	dir := t.TempDir()
	c := config.Default()
	c.NodeName = name
	c.StateDir = filepath.Join(dir, "state")
	c.Cluster.Address = "127.0.0.1"
	c.Cluster.PeerPort, c.Cluster.ClientPort, c.Cluster.JoinPort = etcdtest.FreePort(t), etcdtest.FreePort(t), etcdtest.FreePort(t)
	log := slog.New(slog.DiscardHandler)
	mgr, err := volmgr.New(volmgr.Options{Config: c, Drives: drive.System(c.StateDir), Log: log, HostDir: filepath.Join(dir, "nvme")})
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.New(cluster.Options{
		Dir: filepath.Join(c.StateDir, "cluster"), Name: name, Address: c.Cluster.Address,
		PeerPort: c.Cluster.PeerPort, ClientPort: c.Cluster.ClientPort, JoinPort: c.Cluster.JoinPort,
		Members: c.Cluster.Members, LeaseTTL: 2, Log: log,
		Inventory: func() cluster.Inventory { return cluster.Inventory{HostNQN: mgr.HostNQN()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return New(Options{Config: c, Log: log, Manager: mgr, Node: n})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// initPlane is testPlane's node as the only member of a new cluster c1.
func initPlane(t *testing.T, name string) *Plane {
	t.Helper()
	pl := testPlane(t, name)
	if err := pl.cluster.Init(testCtx(t), "c1"); err != nil {
		t.Fatal(err)
	}
	return pl
}

// twoPlanes is a cluster of n1 (init) and n2 (joined).
func twoPlanes(t *testing.T) (p1, p2 *Plane) {
	t.Helper()
	p1, p2 = initPlane(t, "n1"), testPlane(t, "n2")
	tok, err := p1.cluster.Token(testCtx(t), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.cluster.Join(testCtx(t), fmt.Sprintf("127.0.0.1:%d", p1.cfg.Cluster.JoinPort), tok.Encode()); err != nil {
		t.Fatal(err)
	}
	return p1, p2
}

// opCall asks pl for an engine operation ("POST /v1/volumes/{ref}/{op}")
// or a request's state ("GET /v1/volumes/{ref}/requests/{id}") as the
// daemon's API does, and checks the HTTP status it would answer with:
// ErrorCode of an error, 202 for a request not done, else 200. It
// returns the body the daemon would write and decodes it into out.
func opCall(t *testing.T, pl *Plane, method, path string, q api.OpRequest, code int, out any) string {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(path, "/v1/volumes/"), "/")
	var (
		rep *api.OpReply
		err error
	)
	switch {
	case method == "POST" && len(parts) == 2:
		rep, err = pl.Op(context.Background(), parts[0], parts[1], q)
	case method == "GET" && len(parts) == 3 && parts[1] == "requests":
		rep, err = pl.Request(context.Background(), parts[0], parts[2])
	default:
		t.Fatalf("opCall: %s %s is not an operation", method, path)
	}
	got, body := http.StatusOK, any(map[string]bool{"ok": true})
	switch {
	case err != nil:
		got, body = ErrorCode(err), map[string]string{"error": err.Error()}
	case rep != nil:
		body = rep
		if rep.State != model.RequestDone {
			got = http.StatusAccepted
		}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(body)
	if got != code {
		t.Fatalf("%s %s: %d %s, want %d", method, path, got, b.String(), code)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b.String()), out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b.String())
		}
	}
	return b.String()
}
