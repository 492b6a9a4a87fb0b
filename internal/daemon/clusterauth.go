package daemon

import (
	"context"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/exporter"
)

// Exports without DH-HMAC-CHAP (require_auth, docs/cluster.md "Security")
//
// Each reconcile first asks the target (the drive exporter's cached
// feature probe) whether it has DH-HMAC-CHAP. With require_auth (the
// default) a target without it makes the node export nothing
// (exporter.Refusal): the drive exporter applies an empty spec, the
// volume manager exports no volume (ClusterPlan.Refused), the node
// acquires no owner key (ownership.reconcile) and takes no volume over
// (plan.ChooseOwner), and its registry record says so (model.Node.Exports,
// ExportsWhy), which keeps placement off it and shows in cluster status.
// The log says it once per change of the node's export state.

// exportRefusal decides this reconcile's export state, records it for
// the registry (Inventory), logs it when it changed, and marks this node
// in v so that this pass's ownership and takeover decisions use it
// before the registry has it. nil: the node may export; also when the
// target cannot be asked (the drive exporter reports that error).
func (d *Daemon) exportRefusal(ctx context.Context, v *clusterView) error {
	f, err := d.loop.x.Features(ctx)
	if err != nil {
		return nil
	}
	refused := exporter.Refusal(f.Auth, !d.opts.Config.Cluster.RequireAuth)
	state, why := exportState(f.Auth, refused)
	if d.loop.noteExports(state, why) {
		switch state {
		case model.ExportsRefused:
			d.log.Error("exports refused: this node exports no drives and no volumes and owns no volume", "reason", why)
		case model.ExportsHostNQN:
			d.log.Warn("exports by host NQN alone: require_auth = false and the NVMe target has no DH-HMAC-CHAP")
		default:
			d.log.Info("exports require DH-HMAC-CHAP of every host")
		}
	}
	for i := range v.Nodes {
		if v.Nodes[i].Name == v.Self {
			v.Nodes[i].Exports, v.Nodes[i].ExportsWhy = state, why
		}
	}
	return refused
}

// exportState is model.Node.Exports and ExportsWhy for a target with
// DH-HMAC-CHAP or not (auth) and the refusal. Pure.
func exportState(auth bool, refused error) (state, why string) {
	switch {
	case refused != nil:
		return model.ExportsRefused, refused.Error()
	case auth:
		return model.ExportsDHCHAP, ""
	}
	return model.ExportsHostNQN, ""
}

// noteExports records the node's export state and says whether it
// changed (the first one counts as a change).
func (c *clusterLoop) noteExports(state, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exports == state && c.exportsWhy == why {
		return false
	}
	c.exports, c.exportsWhy = state, why
	return true
}

// exportsState is the last export state (Inventory); "" before the first.
func (c *clusterLoop) exportsState() (state, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports, c.exportsWhy
}

// refusedNodes are vol's nodes (owner and members) that export nothing,
// each as "node: reason" (api.Volume.ExportRefused).
func refusedNodes(v *clusterView, vol model.Volume) []string {
	var out []string
	for _, n := range v.Nodes {
		if !n.CannotExport() {
			continue
		}
		in := n.Name == vol.Owner
		for _, m := range vol.Members {
			in = in || m.Node == n.Name
		}
		if in {
			out = append(out, n.Name+": "+n.ExportsWhy)
		}
	}
	return out
}
