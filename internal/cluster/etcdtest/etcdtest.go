// Package etcdtest starts a real one-member etcd (embedded, in the test's
// process) on loopback for tests of code that reads and writes etcd, and
// hands out loopback ports for tests that run several members. It uses
// plain HTTP: the TLS setup is internal/cluster's job and tested there.
package etcdtest

import (
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Start runs a new etcd member in a temporary directory and returns a
// client of it; both stop when the test ends.
func Start(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	// Port 0: the kernel picks free ports at bind time; one member never
	// dials its own peer URL, and the client URL is read back below.
	u := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{u}, []url.URL{u}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{u}, []url.URL{u}
	cfg.InitialCluster = cfg.Name + "=" + u.String()
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.Logger = "zap"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcdtest: start: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcdtest: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcdtest: member not ready after 30 s")
	}
	addr := "http://" + e.Clients[0].Addr().String()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// handed is every port FreePort returned in this process: members of one
// test bind theirs only later, so a check that the port is free cannot
// tell them apart.
var handed = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback TCP port for a listener whose address must
// be known before it binds (the peer URLs of a multi-member cluster). A
// port the kernel picks for port 0 is an ephemeral one, which any
// process's outgoing connection may take before the listener binds it
// (seen: "bind: address already in use" with tests running side by
// side); these come from below the ephemeral range, where only
// listeners go, are free when returned and never returned twice by one
// process.
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	handed.Lock()
	defer handed.Unlock()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if handed.ports[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		handed.ports[p] = true
		return p
	}
	t.Fatalf("etcdtest: no free loopback port in %d-%d", lo, hi-1)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (the
// ports it picks for outgoing connections and for port 0).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
			return n
		}
	}
	return 32768
}
