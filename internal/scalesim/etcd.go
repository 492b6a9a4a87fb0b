package scalesim

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a real etcd cluster of embedded members on loopback (plain
// HTTP: the TLS of the product's members costs the same for every node
// and is left out).
type Etcd struct {
	members   []*embed.Etcd
	Endpoints []string
}

// StartEtcd starts n members (1 or 3) in dir with etcd's default timing
// (heartbeat 100 ms, election 1000 ms: fabraid's defaults); ports are
// free loopback ports from freePort.
func StartEtcd(dir string, n int, freePort func() int) (*Etcd, error) {
	type urls struct{ peer, client url.URL }
	us := make([]urls, n)
	var initial []string
	for i := range us {
		us[i] = urls{
			peer:   url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort()))},
			client: url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort()))},
		}
		initial = append(initial, fmt.Sprintf("m%d=%s", i, us[i].peer.String()))
	}
	e := &Etcd{}
	for i, u := range us {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{u.peer}, []url.URL{u.peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{u.client}, []url.URL{u.client}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.Logger = "zap"
		m, err := embed.StartEtcd(cfg)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("scalesim: etcd member %d: %w", i, err)
		}
		e.members = append(e.members, m)
		e.Endpoints = append(e.Endpoints, u.client.String())
	}
	for i, m := range e.members {
		select {
		case <-m.Server.ReadyNotify():
		case err := <-m.Err():
			e.Close()
			return nil, fmt.Errorf("scalesim: etcd member %d: %w", i, err)
		case <-time.After(60 * time.Second):
			e.Close()
			return nil, fmt.Errorf("scalesim: etcd member %d not ready after 60 s", i)
		}
	}
	return e, nil
}

// Client returns a new client of every member.
func (e *Etcd) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// DBSize is the largest backend size of the members, in bytes.
func (e *Etcd) DBSize(ctx context.Context, cli *clientv3.Client) (int64, error) {
	var largest int64
	for _, ep := range e.Endpoints {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return 0, fmt.Errorf("scalesim: status of %s: %w", ep, err)
		}
		largest = max(largest, st.DbSize)
	}
	return largest, nil
}

// Close stops every member.
func (e *Etcd) Close() {
	for _, m := range e.members {
		m.Close()
	}
}
