package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Bidirectional DH-HMAC-CHAP (docs/cluster.md "Security")
//
// Every node has a controller secret besides its host secret (both made
// once, 0600 files, published together at /hostkeys/<node>). Its nvmet
// puts its controller secret on every host entry that has a host key
// (dhchap_ctrl_key), drive exports (exporter.Input.CtrlSecret) and volume
// exports (volmgr.ClusterPlan.CtrlSecret) alike; a host connecting to a
// node's export passes that node's controller secret (dhchap_ctrl_secret:
// member imports, importer.Remote.CtrlSecret; consumer connections,
// volmgr.Consumer.CtrlSecret), and its kernel refuses a target that cannot
// answer the host's challenge with it.

// enableRBACError gives EnableRBAC's refusals their HTTP status and say
// what to do instead.
func enableRBACError(err error) error {
	switch {
	case errors.Is(err, cluster.ErrNotMember):
		return &ownerError{code: http.StatusConflict, msg: "this node is a client-only node (no etcd member): run fabraid cluster enable-rbac on an etcd member (fabraid cluster status lists them)"}
	case errors.Is(err, cluster.ErrExternal):
		return &ownerError{code: http.StatusConflict, msg: "the cluster uses external etcd: its users, roles and authentication are its operator's (docs/cluster.md, \"etcd RBAC\")"}
	}
	return err
}

// rotateWait bounds how long rotate-keys waits for this node's target to
// present the new controller key and for its publication.
const rotateWait = 60 * time.Second

// RotateKeys rotates this node's controller secret: a new one is kept
// (cluster.Node.RotateCtrlSecret), the next reconcile puts it on every
// host entry of this node's target (drive and volume exports), and once
// the target presents it (publishRotatedKey, at the end of that
// reconcile) it goes to etcd; every host then re-keys its live
// controllers to this node at its next reconcile (nvmf.ConnectionPlan.Rekey:
// the kernel re-authenticates them, I/O flows on).
// With host it rotates the host secret instead (rotateHostKey).
func (pl *Plane) RotateKeys(ctx context.Context, host bool) (api.RotateKeysReply, error) {
	if host {
		return pl.rotateHostKey(ctx)
	}
	if err := pl.cluster.RotateCtrlSecret(); err != nil {
		return api.RotateKeysReply{}, err
	}
	start := time.Now()
	pl.kick()
	if !waitFor(ctx, rotateWait, func() bool { return !pl.cluster.CtrlPending() }) {
		return api.RotateKeysReply{}, fmt.Errorf("the new controller key is kept but not presented by this node's target after %s (it is published by the first reconcile that applies it; see the log)", rotateWait)
	}
	return api.RotateKeysReply{Rotated: []string{"controller"}, Seconds: time.Since(start).Seconds()}, nil
}

// publishRotatedKey publishes a rotated controller secret
// (cluster.Node.CtrlPending) once every host entry with a host key on
// this node's target, drive and volume exports alike, has it as its
// controller key: only then may the hosts ask for it. Called at the end
// of each reconcile; it first does the host key rotations' steps
// (hostRotations).
func (pl *Plane) publishRotatedKey(ctx context.Context) error {
	if err := pl.hostRotations(ctx); err != nil { // hostrotate.go
		return err
	}
	if !pl.cluster.CtrlPending() {
		return nil
	}
	own, ok := pl.cluster.CtrlSecret()
	if !ok {
		return nil
	}
	for _, scope := range []string{exporter.NQNPrefix, volid.NQNPrefix} {
		xs, err := pl.loop.x.Target.List(ctx, scope)
		if err != nil {
			return fmt.Errorf("rotated controller key: read the target: %w", err)
		}
		for _, x := range xs {
			for _, h := range x.Hosts {
				if h.DHCHAPKey != "" && string(h.DHCHAPCtrlKey) != own.Reveal() {
					return nil // not yet: the next reconcile looks again
				}
			}
		}
	}
	if err := pl.cluster.PublishKeys(ctx); err != nil {
		return fmt.Errorf("publish the rotated controller key: %w", err)
	}
	pl.log.Info("rotated DH-HMAC-CHAP controller key presented by this node's target and published; hosts re-authenticate at their next reconcile")
	return nil
}

// readCtrlKeys sets v.CtrlKeys: every node's controller secret from etcd,
// this node's own from its file (what its nvmet presents, even before
// etcd has it); and, from the same read, v.HostKeys and v.Rekeys with the
// other nodes' announced host key rotations (withHostRotations).
func (pl *Plane) readCtrlKeys(ctx context.Context, kv clientv3.KV, v *clusterView) error {
	recs, err := volumes.HostKeyRecords(ctx, kv)
	if err != nil {
		return fmt.Errorf("controller keys: %w", err)
	}
	host, ctrl := volumes.SplitNodeKeys(recs)
	if own, ok := pl.cluster.CtrlSecret(); ok {
		ctrl[v.Self] = nvmf.SecretText(own.Reveal())
	}
	v.CtrlKeys, v.HostKeys = ctrl, host
	withHostRotations(v, recs)
	return nil
}

// withCtrlKeys completes the volume manager's plan for bidirectional
// authentication: this node's controller secret on its volume exports,
// each consumer volume's owner's controller secret on its connections.
func withCtrlKeys(mp *volmgr.ClusterPlan, v *clusterView) {
	mp.CtrlSecret = v.CtrlKeys[v.Self]
	owner := consumerOwners(v)
	for i := range mp.Consumers {
		mp.Consumers[i].CtrlSecret = v.CtrlKeys[owner[mp.Consumers[i].UUID]]
	}
}

// consumerOwners maps each consumable volume of v to its owner node.
func consumerOwners(v *clusterView) map[[16]byte]string {
	owner := map[[16]byte]string{}
	for _, c := range plan.Consumers(v.View) {
		owner[c.UUID] = c.Owner
	}
	return owner
}

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
func (pl *Plane) exportRefusal(ctx context.Context, v *clusterView) error {
	f, err := pl.loop.x.Features(ctx)
	if err != nil {
		return nil
	}
	refused := exporter.Refusal(f.Auth, !pl.cfg.Cluster.RequireAuth)
	ports, tlsRefused := pl.exportTLS(f) // tls.go
	if refused == nil {
		refused = tlsRefused
	}
	state, why := exportState(f.Auth, refused)
	if pl.loop.noteExports(state, why) {
		switch state {
		case model.ExportsRefused:
			pl.log.Error("exports refused: this node exports no drives and no volumes and owns no volume", "reason", why)
		case model.ExportsHostNQN:
			pl.log.Warn("exports by host NQN alone: require_auth = false and the NVMe target has no DH-HMAC-CHAP")
		default:
			pl.log.Info("exports require DH-HMAC-CHAP of every host")
		}
	}
	for i := range v.Nodes {
		if v.Nodes[i].Name == v.Self {
			v.Nodes[i].Exports, v.Nodes[i].ExportsWhy, v.Nodes[i].NVMeTLS = state, why, ports
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
