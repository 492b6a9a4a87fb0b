package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/kernel/netif"
)

// newCluster prepares the node's cluster membership from the
// configuration; a node in no cluster starts nothing (see Run).
func (d *Daemon) newCluster() (*cluster.Node, error) {
	c := d.opts.Config
	storage := storageAddresses(c)
	addr := c.Cluster.Address
	if addr == "" && len(storage) > 0 {
		addr = storage[0]
	}
	o := cluster.Options{
		Dir: filepath.Join(c.StateDir, "cluster"), Name: c.NodeName, Domain: c.Cluster.Domain, Address: addr,
		PeerPort: c.Cluster.PeerPort, ClientPort: c.Cluster.ClientPort, JoinPort: c.Cluster.JoinPort,
		Members: c.Cluster.Members, LeaseTTL: c.Cluster.LeaseTTL, Log: d.log,
		TickMs: uint(c.Cluster.HeartbeatMs), ElectionMs: uint(c.Cluster.ElectionMs),
		Inventory: func() cluster.Inventory {
			inv := cluster.Inventory{HostNQN: d.mgr.HostNQN(), StorageAddresses: storageAddresses(c), Drives: claimedDrives(c.StateDir)}
			inv.Exports, inv.ExportsWhy = d.plane.ExportsState() // set before Start calls this
			inv.NVMeTLS = d.plane.TLSPorts()
			return inv
		},
	}
	if len(c.Cluster.Endpoints) > 0 {
		t, err := externalTLS(c.Cluster)
		if err != nil {
			return nil, err
		}
		o.External, o.ExternalTLS = c.Cluster.Endpoints, t
	}
	return cluster.New(o)
}

func externalTLS(c config.Cluster) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("etcd_cert_file/etcd_key_file: %w", err)
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("etcd_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("etcd_ca_file %s: no certificate", c.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// storageAddresses are the node's addresses on the storage network
// (storage_cidrs, storage_interfaces); none when neither is set.
func storageAddresses(c config.Config) []string {
	var sels []netif.Selector
	for _, p := range c.StorageCIDRs {
		sels = append(sels, netif.Selector{CIDR: p, IncludeLoopback: p.Addr().IsLoopback(), IncludeLinkLocal: p.Addr().IsLinkLocalUnicast()})
	}
	for _, i := range c.StorageInterfaces {
		sels = append(sels, netif.Selector{Iface: i})
	}
	if len(sels) == 0 {
		return nil
	}
	all, err := netif.Addresses()
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range sels {
		for _, a := range netif.Select(all, s) {
			if ip := a.Prefix.Addr().String(); !seen[ip] {
				seen[ip] = true
				out = append(out, ip)
			}
		}
	}
	return out
}

func claimedDrives(stateDir string) []registry.Drive {
	ds, err := drive.System(stateDir).ClaimedDrives()
	if err != nil {
		return nil
	}
	out := make([]registry.Drive, 0, len(ds))
	for _, d := range ds {
		out = append(out, registry.Drive{ID: d.ID, Serial: d.Serial, Model: d.Model, Size: d.Size, Spare: d.Spare})
	}
	return out
}

// startCluster brings up the node's membership, retrying every interval
// while it fails (etcd peers not up yet); volumes are served meanwhile.
// Each Start is bounded (cluster.Options ReadyTimeout, StepTimeout) and
// stops what it started when it fails, so a retry binds the ports again.
func (d *Daemon) startCluster(ctx context.Context) {
	began := time.Now()
	for {
		err := d.cluster.Start(ctx)
		if err == nil {
			if d.cluster.InCluster() {
				d.log.Info("cluster: membership up", "took", time.Since(began).Round(time.Millisecond).String())
			}
			return
		}
		d.log.Error("cluster: cannot start; retrying", "err", err, "in", d.opts.Interval.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.opts.Interval):
		}
	}
}

// clusterRoutes adds the /v1/cluster API (see package api).
func (d *Daemon) clusterRoutes(mux *http.ServeMux, reply func(http.ResponseWriter, any, error), decode func(*http.Request, any) error) {
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		s, err := d.cluster.Status(r.Context())
		reply(w, s, err)
	})
	mux.HandleFunc("POST /v1/cluster/init", func(w http.ResponseWriter, r *http.Request) {
		var q api.ClusterInitRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		if err := d.checkNoLocalVolumes(); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, nil, d.cluster.Init(r.Context(), q.Name))
	})
	mux.HandleFunc("POST /v1/cluster/tokens", func(w http.ResponseWriter, r *http.Request) {
		var q api.TokenRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		ttl := time.Duration(q.TTLSeconds) * time.Second
		if ttl <= 0 {
			ttl = time.Hour
		}
		t, err := d.cluster.Token(r.Context(), ttl)
		reply(w, api.TokenReply{Token: t.Encode(), Expires: time.Now().Add(ttl).UTC()}, err)
	})
	mux.HandleFunc("POST /v1/cluster/join", func(w http.ResponseWriter, r *http.Request) {
		var q api.JoinRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		if err := d.checkNoLocalVolumes(); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, nil, d.cluster.Join(r.Context(), q.Address, q.Token))
	})
	mux.HandleFunc("POST /v1/cluster/leave", func(w http.ResponseWriter, r *http.Request) {
		var q api.LeaveRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, nil, d.cluster.Leave(r.Context(), q.Force))
	})
	mux.HandleFunc("DELETE /v1/cluster/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, d.cluster.Remove(r.Context(), r.PathValue("name")))
	})
	// etcd RBAC on a cluster made before it, and a new controller or host
	// secret for this node (package clusterplane, auth.go, hostrotate.go).
	mux.HandleFunc("POST /v1/cluster/rbac", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, d.plane.EnableRBAC(r.Context()))
	})
	mux.HandleFunc("POST /v1/cluster/rotate-keys", func(w http.ResponseWriter, r *http.Request) {
		var q api.RotateKeysRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		out, err := d.plane.RotateKeys(r.Context(), q.Host)
		reply(w, out, err)
	})
}

var errLocalVolumes = errors.New("this node has one-node volumes")

// checkNoLocalVolumes refuses init and join on a node with one-node
// volumes: in a cluster the node serves only what etcd records, so their
// exports would go.
func (d *Daemon) checkNoLocalVolumes() error {
	if d.plane.InCluster() {
		return nil // cluster.Node refuses with its own reason
	}
	var names []string
	for _, v := range d.mgr.List() {
		names = append(names, v.Name)
	}
	if len(names) > 0 {
		return fmt.Errorf("%w (%s): a node goes into a cluster without volumes (delete them first)", errLocalVolumes, strings.Join(names, ", "))
	}
	return nil
}
