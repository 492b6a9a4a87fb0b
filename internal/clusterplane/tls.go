package clusterplane

import (
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/plugins/backend"
)

// NVMe/TCP TLS on member connections (nvme_tls; internal/fabrictls;
// docs/cluster.md "Security")
//
// Each reconcile decides, before anything is exported, what this node's
// drive ports offer (fabrictls.Target: the setting and the target's
// support, probed every pass since tlshd may start or stop); "required"
// without support refuses exports as require_auth does (exportRefusal).
// The decision goes into the node's registry record (model.Node.NVMeTLS,
// through Inventory), and each host decides every member connection from
// its own setting and support and that record (importTLS). Volume paths
// (volume exports, consumers) follow the same decisions (volumeTLS).

// tlsMode is the nvme_tls setting (config validates it; empty is off).
func (pl *Plane) tlsMode() fabrictls.Mode {
	if pl.cfg.Cluster.NVMeTLS == "" {
		return fabrictls.Off
	}
	return fabrictls.Mode(pl.cfg.Cluster.NVMeTLS)
}

// exportTLS decides this reconcile's drive ports (fabrictls.Target) with
// the target's features f, records them (TLSPorts) and logs a change. A
// non-nil error refuses every export.
func (pl *Plane) exportTLS(f backend.Features) (string, error) {
	mode := pl.tlsMode()
	var s fabrictls.Support
	if mode != fabrictls.Off {
		s = pl.loop.targetTLS(f.TLS)
	}
	ports, err := fabrictls.Target(mode, s)
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case mode == fabrictls.On && ports == fabrictls.PortsPlain:
		why = "nvme_tls = on and this node's target cannot do TLS: it lacks " + s.Missing(fabrictls.TargetOption) + "; drive ports plain"
	}
	if pl.loop.noteTLS(ports, why) && mode != fabrictls.Off {
		switch {
		case err != nil: // exportRefusal logs the refusal with why
		case why != "":
			pl.log.Warn("NVMe/TCP TLS: " + why)
		default:
			pl.log.Info("NVMe/TCP TLS: drive ports", "nvme_tls", string(mode), "tls", tlsPortsText(ports))
		}
	}
	return ports, err
}

func tlsPortsText(ports string) string {
	if ports == fabrictls.PortsPlain {
		return "none"
	}
	return ports
}

// importTLS decides each member connection of in (fabrictls.Host: this
// node's setting and host support, the exporting node's record): TLS, or
// plain, or none (Remote.Refused, which keeps an existing controller).
func (pl *Plane) importTLS(in *importer.Input, v *clusterView) {
	if len(in.Remotes) == 0 {
		return
	}
	decide := pl.hostTLSDecider(v)
	for i := range in.Remotes {
		r := &in.Remotes[i]
		r.TLS, r.Refused = decide(r.Node)
	}
}

// hostTLSDecider returns the decision of a connection from this node to
// an export of node (fabrictls.Host with that node's registry record):
// TLS or not, and why it is refused ("" when not). It probes the host's
// support once, and not at all under off.
func (pl *Plane) hostTLSDecider(v *clusterView) func(node string) (tls bool, refused string) {
	mode := pl.tlsMode()
	var s fabrictls.Support
	if mode != fabrictls.Off {
		s = pl.loop.hostTLS()
	}
	ports := map[string]string{}
	for _, n := range v.Nodes {
		ports[n.Name] = n.NVMeTLS
	}
	return func(node string) (bool, string) {
		tls, err := fabrictls.Host(mode, s, ports[node])
		if err != nil {
			return tls, "NVMe/TCP TLS: " + err.Error()
		}
		return tls, ""
	}
}

// volumeTLS completes the volume manager's plan for TLS on the volume
// paths: this node's volume ports offer what its drive ports offer (its
// record in v, set by exportRefusal this pass), and each consumer
// connection is decided as a member connection is, from the owner's
// record (hostTLSDecider). A refusal is logged once per change and shown
// by volume show (PathRefused).
func (pl *Plane) volumeTLS(mp *volmgr.ClusterPlan, v *clusterView) {
	if self, ok := v.node(v.Self); ok {
		mp.TLS = self.NVMeTLS
	}
	decide := pl.hostTLSDecider(v)
	owner := consumerOwners(v)
	refused := map[[16]byte]string{}
	for i := range mp.Consumers {
		c := &mp.Consumers[i]
		c.TLS, c.Refused = decide(owner[c.UUID])
		if c.Refused != "" {
			refused[c.UUID] = c.Refused
		}
	}
	for u, why := range pl.loop.notePathTLS(refused) {
		if why == "" {
			pl.log.Info("NVMe/TCP TLS: volume path no longer refused", "uuid", volid.Format(u))
		} else {
			pl.log.Error("NVMe/TCP TLS: volume path refused: no new connection to the volume's owner", "uuid", volid.Format(u), "reason", why)
		}
	}
}

// notePathTLS records the refused consumer connections of this pass and
// returns the changes: a new or changed reason, or "" for a volume no
// longer refused.
func (c *clusterLoop) notePathTLS(refused map[[16]byte]string) map[[16]byte]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := map[[16]byte]string{}
	for u, why := range refused {
		if c.pathRefused[u] != why {
			changed[u] = why
		}
	}
	for u := range c.pathRefused {
		if _, ok := refused[u]; !ok {
			changed[u] = ""
		}
	}
	c.pathRefused = refused
	return changed
}

// pathRefusedWhy is why this node makes no new connection to volume u
// (api.Volume.PathRefused); "" when it does.
func (c *clusterLoop) pathRefusedWhy(u [16]byte) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pathRefused[u]
}

// noteTLS records the drive ports' TLS and why they are not what the
// setting asks, and says whether that changed (the first counts).
func (c *clusterLoop) noteTLS(ports, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tlsDecided && c.tls == ports && c.tlsWhy == why {
		return false
	}
	c.tlsDecided, c.tls, c.tlsWhy = true, ports, why
	return true
}

// TLSPorts is what this node's drive ports offer, for its registry
// record (model.Node.NVMeTLS); plain before the first reconcile.
func (pl *Plane) TLSPorts() string {
	c := pl.loop
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tls
}
