package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/store"
	"github.com/fabraid/fabraid/internal/cluster/token"
)

// These tests run real etcd members (embedded, several in this process)
// on loopback ports with TLS, in temporary directories.

type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

func newNode(t *testing.T, name string, c *clock) *Node {
	t.Helper()
	n, err := New(Options{
		Dir: t.TempDir() + "/cluster", Name: name, Address: "127.0.0.1",
		PeerPort: etcdtest.FreePort(t), ClientPort: etcdtest.FreePort(t), JoinPort: etcdtest.FreePort(t),
		Members: 3, LeaseTTL: 2, TickMs: 20, ElectionMs: 200,
		Inventory: func() Inventory {
			return Inventory{HostNQN: "nqn.2014-08.org.nvmexpress:uuid:" + name, StorageAddresses: []string{"10.0.0.1"},
				Drives: []registry.Drive{{ID: name + "-d1", Serial: "S1", Size: 1 << 30}}}
		},
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Now: c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func joinAddr(n *Node) string { return fmt.Sprintf("127.0.0.1:%d", n.o.JoinPort) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustToken(t *testing.T, n *Node, ttl time.Duration) string {
	t.Helper()
	tok, err := n.Token(ctxT(t), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode()
}

func voting(s Status) (v, l int) {
	for _, m := range s.Members {
		if m.Learner {
			l++
		} else {
			v++
		}
	}
	return
}

func TestInitJoinTokens(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, n2, n3, n4 := newNode(t, "n1", &c), newNode(t, "n2", &c), newNode(t, "n3", &c), newNode(t, "n4", &c)
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if err := n1.Init(ctx, "test"); !errors.Is(err, ErrInCluster) {
		t.Errorf("second init: %v, want ErrInCluster", err)
	}
	tok := mustToken(t, n1, time.Hour)
	if err := n2.Join(ctx, joinAddr(n1), tok); err != nil {
		t.Fatalf("join n2: %v", err)
	}

	// The same token again: refused, nothing changed on n3.
	err := n3.Join(ctx, joinAddr(n1), tok)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "already used by node n2") {
		t.Errorf("reused token: %v, want a refusal naming n2", err)
	}
	if n3.InCluster() {
		t.Error("n3 is in a cluster after a refused join")
	}
	// A wrong secret, an unknown id, a token of another CA.
	good, _ := token.Parse(mustToken(t, n1, time.Hour))
	wrong := good
	wrong.Secret = strings.Repeat("0", 32)
	if err := n3.Join(ctx, joinAddr(n1), wrong.Encode()); !strings.Contains(fmt.Sprint(err), "wrong join token secret") {
		t.Errorf("wrong secret: %v", err)
	}
	unknown := good
	unknown.ID = "000000000000"
	if err := n3.Join(ctx, joinAddr(n1), unknown.Encode()); !strings.Contains(fmt.Sprint(err), "unknown join token") {
		t.Errorf("unknown token: %v", err)
	}
	otherCA := good
	otherCA.CA = strings.Repeat("a", 64)
	if err := n3.Join(ctx, joinAddr(n1), otherCA.Encode()); !strings.Contains(fmt.Sprint(err), "not the one in the join token") {
		t.Errorf("token of another CA: %v", err)
	}
	if err := n3.Join(ctx, joinAddr(n1), "fbj1.nonsense"); !errors.Is(err, token.ErrMalformed) {
		t.Errorf("malformed token: %v", err)
	}
	// Expired: the token lives 1 minute on n1's clock, which then
	// moves 2 minutes on.
	short := mustToken(t, n1, time.Minute)
	c.advance(2 * time.Minute)
	if err := n3.Join(ctx, joinAddr(n1), short); !strings.Contains(fmt.Sprint(err), "join token expired") {
		t.Errorf("expired token: %v", err)
	}
	if n3.InCluster() {
		t.Error("n3 is in a cluster after refused joins")
	}
	// The unused good token still works, through n2's join service.
	if err := n3.Join(ctx, joinAddr(n2), good.Encode()); err != nil {
		t.Fatalf("join n3: %v", err)
	}
	if err := n4.Join(ctx, joinAddr(n1), mustToken(t, n1, time.Hour)); err != nil {
		t.Fatalf("join n4: %v", err)
	}

	st, err := n3.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, l := voting(st); v != 3 || l != 0 || !st.Healthy || st.Leader == "" {
		t.Errorf("status: %d voting, %d learners, healthy %v, leader %q; want 3 healthy voting members and a leader\n%+v", v, l, st.Healthy, st.Leader, st.Members)
	}
	if len(st.Nodes) != 4 {
		t.Fatalf("nodes %+v, want 4", st.Nodes)
	}
	for _, ns := range st.Nodes {
		if !ns.Alive || len(ns.Drives) != 1 || ns.HostNQN == "" || ns.Domain != ns.Name {
			t.Errorf("node %+v: want alive with 1 drive, host NQN, domain = name", ns)
		}
		if member := ns.EtcdMember != ""; member != (ns.Name != "n4") {
			t.Errorf("node %s etcd member %q: want n1..n3 members, n4 a client", ns.Name, ns.EtcdMember)
		}
	}
	if !n4.st.Member == false {
		t.Error("n4 became an etcd member beyond the target of 3")
	}

	// Without a client certificate nobody reads etcd: the TLS handshake
	// is refused.
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(n1.files.CACert())
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", n1.o.ClientPort), &tls.Config{RootCAs: pool})
	if err == nil {
		// TLS 1.3 reports the server's refusal on the first read.
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("client without certificate: %v, want the handshake refused (certificate required)", err)
	}
	anon, err := clientv3.New(clientv3.Config{Endpoints: []string{n1.url(n1.o.ClientPort)}, TLS: &tls.Config{RootCAs: pool}, DialTimeout: 2 * time.Second})
	if err == nil {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = anon.Get(gctx, keys.Cluster)
		cancel()
		anon.Close()
	}
	if err == nil {
		t.Error("a client without a certificate read etcd")
	}
}

func waitDead(t *testing.T, cli *clientv3.Client, name string) {
	t.Helper()
	ctx := ctxT(t)
	wc := cli.Watch(ctx, keys.Alive(name), clientv3.WithRev(1))
	for resp := range wc {
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
	t.Fatalf("alive key of %s not deleted: %v", name, ctx.Err())
}

func TestLivenessLeaveRemove(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, n2, n3, n4 := newNode(t, "n1", &c), newNode(t, "n2", &c), newNode(t, "n3", &c), newNode(t, "n4", &c)
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{n2, n3, n4} {
		if err := n.Join(ctx, joinAddr(n1), mustToken(t, n1, time.Hour)); err != nil {
			t.Fatalf("join %s: %v", n.o.Name, err)
		}
	}
	// n4 (a client) crashes: it stops renewing its lease and turns dead
	// when the lease expires; its record stays.
	if err := n1.Remove(ctx, "n4"); err == nil || !errors.Is(err, ErrAlive) {
		t.Errorf("remove of a live node: %v, want refused", err)
	}
	n4.crash = true
	n4.Close()
	waitDead(t, n1.cli, "n4")
	ns, ok, err := registry.Get(ctx, n1.cli, "n4")
	if err != nil || !ok || ns.Alive {
		t.Fatalf("n4 after its lease lapsed: %+v ok %v err %v, want a dead record", ns, ok, err)
	}
	if err := n1.Remove(ctx, "n4"); err != nil {
		t.Fatalf("remove dead n4: %v", err)
	}
	if _, ok, _ := registry.Get(ctx, n1.cli, "n4"); ok {
		t.Error("n4 still registered after remove")
	}

	// n3 (an etcd member) dies; remove takes its member out too.
	n3.crash = true
	n3.Close()
	waitDead(t, n1.cli, "n3")
	if err := n1.Remove(ctx, "n3"); err != nil {
		t.Fatalf("remove dead member n3: %v", err)
	}
	st, err := n1.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := voting(st); v != 2 || len(st.Nodes) != 2 {
		t.Fatalf("after removing n3: %d voting members, nodes %+v; want 2 and 2", v, st.Nodes)
	}

	// Two voting members: leaving would shrink to one; refused unless
	// forced, and nothing changed.
	if err := n2.Leave(ctx, false); !errors.Is(err, store.ErrShrink) {
		t.Fatalf("leave of 1 of 2 members: %v, want ErrShrink", err)
	}
	if err := n2.Leave(ctx, true); err != nil {
		t.Fatalf("forced leave: %v", err)
	}
	if _, err := os.Stat(statePath(n2.o.Dir)); !os.IsNotExist(err) {
		t.Errorf("n2 kept its cluster state after leaving: %v", err)
	}
	st, err = n1.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := voting(st); v != 1 || !st.Healthy || len(st.Nodes) != 1 || st.Nodes[0].Name != "n1" {
		t.Fatalf("after n2 left: %+v", st)
	}

	// n1 restarts from its state: same cluster, alive again.
	n1.Close()
	again := newNode(t, "n1", &c)
	again.o.Dir, again.o.PeerPort, again.o.ClientPort, again.o.JoinPort = n1.o.Dir, n1.o.PeerPort, n1.o.ClientPort, n1.o.JoinPort
	again.files = n1.files
	if err := again.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if ns, ok, err := registry.Get(ctx, again.cli, "n1"); err != nil || !ok || !ns.Alive {
		t.Fatalf("n1 after restart: %+v %v %v", ns, ok, err)
	}
}

// TestExternalEtcd: a node with External set registers itself at Start
// against an etcd it does not run (here n1's embedded one, reached with a
// certificate of n1's CA), and refuses init, join and tokens.
func TestExternalEtcd(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1 := newNode(t, "n1", &c)
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	tlsc, err := n1.files.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	x := newNode(t, "x1", &c)
	x.o.External, x.o.ExternalTLS = []string{n1.url(n1.o.ClientPort)}, tlsc
	if err := x.Start(ctx); err != nil {
		t.Fatalf("start with external etcd: %v", err)
	}
	if ns, ok, err := registry.Get(ctx, n1.cli, "x1"); err != nil || !ok || !ns.Alive || ns.EtcdMember != "" {
		t.Fatalf("x1 in the registry: %+v %v %v, want alive, no etcd member", ns, ok, err)
	}
	if err := x.Init(ctx, "other"); !errors.Is(err, ErrExternal) {
		t.Errorf("init with external etcd: %v, want ErrExternal", err)
	}
	if _, err := x.Token(ctx, time.Hour); !errors.Is(err, ErrExternal) {
		t.Errorf("token with external etcd: %v, want ErrExternal", err)
	}
	if st, err := x.Status(ctx); err != nil || st.Etcd != "external" || len(st.Nodes) != 2 {
		t.Errorf("status: %+v %v", st, err)
	}
}

// TestStatusWithoutQuorum: with two of three etcd members dead, Status on
// the survivor answers (members as it sees them, the reason in Problem)
// instead of waiting for a leader; the context is only a watchdog.
func TestStatusWithoutQuorum(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, n2, n3 := threeMembers(t, &c)
	crash(n2)
	crash(n3)
	st, err := n1.Status(ctx)
	if err != nil {
		t.Fatalf("status without quorum: %v, want an answer", err)
	}
	if st.Healthy || !strings.Contains(st.Problem, "quorum") || len(st.Members) != 3 {
		t.Fatalf("status without quorum: healthy %v problem %q, %d members; want unhealthy, a problem, 3 members",
			st.Healthy, st.Problem, len(st.Members))
	}
	t.Log(st.Problem)
}

// TestRevokeWithoutQuorum: at a shutdown of the whole cluster the last
// members lose quorum before they revoke their leases. The revoke must
// fail for want of a leader, not hold until its context ends (fabraidd's
// stop waits for it), and the lease is left to expire.
func TestRevokeWithoutQuorum(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, n2, n3 := threeMembers(t, &c)
	n1.mu.Lock()
	cli := n1.cli
	n1.mu.Unlock()
	hb, err := registry.StartHeartbeat(ctx, cli, "probe", 60, 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	crash(n2)
	crash(n3)
	for {
		st, err := n1.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(st.Problem, "quorum") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	err = hb.Close(ctx)
	if !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Fatalf("revoke without quorum: %v; want %v", err, rpctypes.ErrNoLeader)
	}
	t.Log(err)
}
