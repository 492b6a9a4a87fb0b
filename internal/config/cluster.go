package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
)

// Cluster is the cluster part of the configuration. A node that never runs
// "fabraid cluster init" or "join" (and sets no etcd_endpoints) ignores it.
type Cluster struct {
	// Address is where this node's etcd member and join service listen
	// (cluster_address). Empty: the first storage address.
	Address string
	// Domain is the failure domain of this node's drives
	// (failure_domain). Empty: the node name.
	Domain string
	// PeerPort, ClientPort and JoinPort: etcd_peer_port (2380),
	// etcd_client_port (2379), join_port (9437).
	PeerPort, ClientPort, JoinPort int
	// Members is how many nodes run an etcd member (etcd_members: 1, 3
	// or 5; default 3).
	Members int
	// LeaseTTL is the node liveness lease in seconds (node_lease_ttl,
	// default 10).
	LeaseTTL int
	// OwnerLeaseTTL is the volume owner lease in seconds
	// (owner_lease_ttl, default 6): a failover takes at least this long
	// after an owner dies, and an owner whose etcd does not renew the
	// lease within it freezes its volumes (docs/cluster.md, "Timing").
	OwnerLeaseTTL int
	// HeartbeatMs and ElectionMs are the embedded etcd member's heartbeat
	// interval and election timeout in milliseconds (etcd_heartbeat_ms,
	// etcd_election_ms; etcd's defaults 100 and 1000). Raise both on
	// slow or loaded nodes, as etcd's tuning guide says: the election
	// timeout at least 5 heartbeats, and the owner lease at least 1.5
	// election timeouts (etcd's minimum lease TTL).
	HeartbeatMs, ElectionMs int
	// Endpoints, when set (etcd_endpoints), use an external etcd with
	// the client certificate CertFile/KeyFile and the CA CAFile.
	Endpoints                 []string
	CAFile, CertFile, KeyFile string
	// RequireAuth (require_auth, default true): a node whose NVMe target
	// has no DH-HMAC-CHAP exports no drives and no volumes instead of
	// allowing its hosts by host NQN alone. False is the conscious
	// opt-out (docs/cluster.md, "Security").
	RequireAuth bool
	// DownOutInterval is how long, in seconds, a node is down before the
	// owners of volumes with members on it replace them on other nodes'
	// free drives (down_out_interval, default 600, Ceph's
	// mon_osd_down_out_interval; 0: never, the admin runs volume
	// replace). A node back before then resyncs its members partially.
	DownOutInterval int
	// NVMeTLS (nvme_tls: off, on or required; default off) is TLS 1.3
	// with a PSK per host pair on member connections (drive exports and
	// member imports; internal/fabrictls). Off by default: it needs
	// tlshd (ktls-utils, not in Debian 12 and not started by fabraid) on
	// every node, and a node whose tlshd is missing or misconfigured
	// under "required" exports and imports nothing.
	NVMeTLS string
}

const clusterKeys = "cluster_address, failure_domain, etcd_peer_port, etcd_client_port, join_port, etcd_members, node_lease_ttl, owner_lease_ttl, etcd_heartbeat_ms, etcd_election_ms, etcd_endpoints, etcd_ca_file, etcd_cert_file, etcd_key_file, require_auth, down_out_interval, nvme_tls"

func defaultCluster() Cluster {
	return Cluster{PeerPort: 2380, ClientPort: 2379, JoinPort: 9437, Members: 3, LeaseTTL: 10, OwnerLeaseTTL: 6, HeartbeatMs: 100, ElectionMs: 1000, RequireAuth: true, DownOutInterval: 600, NVMeTLS: "off"}
}

// set parses one cluster key; ok is false for keys that are not.
func (c *Cluster) set(key, val string) (ok bool, err error) {
	port := func(dst *int) error {
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: want a TCP port 1..65535", val)
		}
		*dst = n
		return nil
	}
	file := func(dst *string) error {
		if !filepath.IsAbs(val) {
			return fmt.Errorf("%q: want an absolute path", val)
		}
		*dst = filepath.Clean(val)
		return nil
	}
	switch key {
	case "cluster_address":
		a, err := netip.ParseAddr(val)
		if err != nil || a.IsUnspecified() {
			return true, fmt.Errorf("%q is not a unicast IP address", val)
		}
		c.Address = a.String()
	case "failure_domain":
		if err := CheckNodeName(val); err != nil {
			return true, err
		}
		c.Domain = val
	case "etcd_peer_port":
		return true, port(&c.PeerPort)
	case "etcd_client_port":
		return true, port(&c.ClientPort)
	case "join_port":
		return true, port(&c.JoinPort)
	case "etcd_members":
		switch val {
		case "1", "3", "5":
			c.Members, _ = strconv.Atoi(val)
		default:
			return true, fmt.Errorf("%q: want 1, 3 or 5 (an odd number keeps a majority after a loss)", val)
		}
	case "node_lease_ttl":
		n, err := strconv.Atoi(val)
		if err != nil || n < 2 || n > 300 {
			return true, fmt.Errorf("%q: want seconds, 2..300", val)
		}
		c.LeaseTTL = n
	case "owner_lease_ttl":
		n, err := strconv.Atoi(val)
		if err != nil || n < 2 || n > 60 {
			return true, fmt.Errorf("%q: want seconds, 2..60", val)
		}
		c.OwnerLeaseTTL = n
	case "etcd_heartbeat_ms":
		n, err := strconv.Atoi(val)
		if err != nil || n < 10 || n > 5000 {
			return true, fmt.Errorf("%q: want milliseconds, 10..5000", val)
		}
		c.HeartbeatMs = n
	case "etcd_election_ms":
		n, err := strconv.Atoi(val)
		if err != nil || n < 50 || n > 50000 {
			return true, fmt.Errorf("%q: want milliseconds, 50..50000", val)
		}
		c.ElectionMs = n
	case "etcd_endpoints":
		c.Endpoints = nil
		for _, e := range list(val) {
			u, err := url.Parse(e)
			if err != nil || u.Scheme != "https" || u.Host == "" || u.Port() == "" {
				return true, fmt.Errorf("%q: want https://host:port (TLS with client certificates only)", e)
			}
			c.Endpoints = append(c.Endpoints, e)
		}
		if len(c.Endpoints) == 0 {
			return true, errors.New("empty: want one or more https://host:port")
		}
	case "etcd_ca_file":
		return true, file(&c.CAFile)
	case "etcd_cert_file":
		return true, file(&c.CertFile)
	case "etcd_key_file":
		return true, file(&c.KeyFile)
	case "require_auth":
		switch val {
		case "true", "false":
			c.RequireAuth = val == "true"
		default:
			return true, fmt.Errorf("%q: want true or false (false exports by host NQN alone when the target has no DH-HMAC-CHAP)", val)
		}
	case "nvme_tls":
		switch val {
		case "off", "on", "required":
			c.NVMeTLS = val
		default:
			return true, fmt.Errorf("%q: want off, on (TLS where both ends can) or required (no member export or import without TLS)", val)
		}
	case "down_out_interval":
		n, err := strconv.Atoi(val)
		if err != nil || n != 0 && (n < 10 || n > 7*24*3600) {
			return true, fmt.Errorf("%q: want seconds, 10..604800, or 0 (never re-protect automatically)", val)
		}
		c.DownOutInterval = n
	default:
		return false, nil
	}
	return true, nil
}

// check validates keys that depend on each other; seen maps keys to lines.
func (c *Cluster) check(seen map[string]int) *Error {
	if c.ElectionMs < 5*c.HeartbeatMs {
		return &Error{Line: max(seen["etcd_election_ms"], seen["etcd_heartbeat_ms"]), Key: "etcd_election_ms",
			Err: fmt.Errorf("%d ms with a heartbeat of %d ms: want at least 5 heartbeats (etcd elects a new leader after missed heartbeats)", c.ElectionMs, c.HeartbeatMs)}
	}
	if min := (3*c.ElectionMs + 1999) / 2000; c.OwnerLeaseTTL < min {
		return &Error{Line: max(seen["owner_lease_ttl"], seen["etcd_election_ms"]), Key: "owner_lease_ttl",
			Err: fmt.Errorf("%d s with an election timeout of %d ms: want at least %d s (etcd's minimum lease TTL is 1.5 election timeouts)", c.OwnerLeaseTTL, c.ElectionMs, min)}
	}
	if len(c.Endpoints) > 0 {
		for _, k := range []struct {
			key string
			v   string
		}{{"etcd_ca_file", c.CAFile}, {"etcd_cert_file", c.CertFile}, {"etcd_key_file", c.KeyFile}} {
			if k.v == "" {
				return &Error{Line: seen["etcd_endpoints"], Key: "etcd_endpoints", Err: fmt.Errorf("needs %s too (external etcd is reached with TLS and a client certificate)", k.key)}
			}
		}
		return nil
	}
	for _, k := range []string{"etcd_ca_file", "etcd_cert_file", "etcd_key_file"} {
		if line, ok := seen[k]; ok {
			return &Error{Line: line, Key: k, Err: errors.New("only used with etcd_endpoints")}
		}
	}
	return nil
}
