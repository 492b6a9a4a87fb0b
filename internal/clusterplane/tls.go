package clusterplane

import (
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/importer"
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
// (volume exports, consumers) stay plain.

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
	mode := pl.tlsMode()
	var s fabrictls.Support
	if mode != fabrictls.Off {
		s = pl.loop.hostTLS()
	}
	ports := map[string]string{}
	for _, n := range v.Nodes {
		ports[n.Name] = n.NVMeTLS
	}
	for i := range in.Remotes {
		r := &in.Remotes[i]
		tls, err := fabrictls.Host(mode, s, ports[r.Node])
		r.TLS = tls
		if err != nil {
			r.Refused = "NVMe/TCP TLS: " + err.Error()
		}
	}
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
