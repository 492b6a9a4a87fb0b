// Package etcdtest starts a real one-member etcd (embedded, in the test's
// process) on loopback for tests of code that reads and writes etcd. It
// uses plain HTTP: the TLS setup is internal/cluster's job and tested
// there.
package etcdtest

import (
	"net"
	"net/url"
	"strconv"
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
	peer, client := loopback(t), loopback(t)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
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
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// loopback returns an http URL on a free loopback port.
func loopback(t testing.TB) url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}
