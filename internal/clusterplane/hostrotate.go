package clusterplane

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// Host key rotation (docs/cluster.md, "Key rotation")
//
// The checking sides of a host secret are the other nodes' targets, so
// they take the new key before the node uses it: (1) the node announces
// it (cluster.Node.RotateHostSecret: model.HostKey.PendingSecret) and
// keeps presenting the old one; (2) every other node's next pass puts the
// pending key on that host's entries, drive and volume exports alike, in
// place (withHostRotations: exporter.Input.Rekeys, so the exporter does
// not fence), reads its target back and acknowledges (ackHostKeys);
// (3) once every other registered node acknowledged, the node promotes the
// key (finishHostRotation: cluster.Node.PromoteHostSecret), and its next
// pass re-keys its live controllers (nvmf.PlanConnections compares their
// dhchap_secret with the key in force and writes the new one; the kernel
// re-authenticates them while I/O flows).

// withHostRotations puts each other node's pending host key (recs) in
// v.HostKeys in place of its secret in force, which is what this node's
// target must allow from now on, and the rotation in v.Rekeys by that
// node's host NQN, so that the exporter changes the host entry in place.
// This node's own pending key is not used: it presents its secret in force
// until it promotes the new one. Pure.
func withHostRotations(v *clusterView, recs map[string]model.HostKey) {
	v.Rekeys = exporter.Rekeys{}
	for _, n := range v.Nodes {
		h, ok := recs[n.Name]
		if !ok || n.Name == v.Self || h.PendingSecret == "" || n.HostNQN == "" {
			continue
		}
		v.HostKeys[n.Name] = nvmf.SecretText(h.PendingSecret)
		v.Rekeys[n.HostNQN] = exporter.Rekey{Old: nvmf.SecretText(h.Secret), New: nvmf.SecretText(h.PendingSecret)}
	}
}

// hostKeyApplied says whether every entry of host nqn in hosts has key;
// an entry without a key (a target without DH-HMAC-CHAP) checks none, and
// no entry at all is nothing to wait for. Pure.
func hostKeyApplied(hosts []backend.Host, nqn string, key nvmf.SecretText) bool {
	return !slices.ContainsFunc(hosts, func(h backend.Host) bool {
		return h.NQN == nqn && h.DHCHAPKey != "" && string(h.DHCHAPKey) != key.Reveal()
	})
}

// hostRotations does this pass's host key rotation steps, after the
// exports were applied: acknowledge the other nodes' pending keys this
// node's target has (ackHostKeys), then promote this node's own once
// every other node acknowledged it (finishHostRotation).
func (pl *Plane) hostRotations(ctx context.Context) error {
	cli := pl.cluster.Client()
	pl.loop.mu.Lock()
	v := pl.loop.view
	pl.loop.mu.Unlock()
	if cli == nil || v == nil {
		return nil
	}
	if err := pl.ackHostKeys(ctx, cli, v); err != nil {
		return err
	}
	_, err := pl.finishHostRotation(ctx, cli, v, false)
	return err
}

// ackHostKeys acknowledges each announced rotation of v.Rekeys whose new
// key every entry of that host on this node's target has, drive and volume
// exports alike (read back from the target).
func (pl *Plane) ackHostKeys(ctx context.Context, cli *clientv3.Client, v *clusterView) error {
	if len(v.Rekeys) == 0 {
		return nil
	}
	var hosts []backend.Host
	for _, scope := range []string{exporter.NQNPrefix, volid.NQNPrefix} {
		xs, err := pl.loop.x.Target.List(ctx, scope)
		if err != nil {
			return fmt.Errorf("host key rotation: read the target: %w", err)
		}
		for _, x := range xs {
			hosts = append(hosts, x.Hosts...)
		}
	}
	for _, n := range v.Nodes {
		r, ok := v.Rekeys[n.HostNQN]
		if !ok || !hostKeyApplied(hosts, n.HostNQN, r.New) {
			continue
		}
		if err := volumes.AckHostKey(ctx, cli, n.Name, v.Self, r.New.Reveal()); err != nil {
			return fmt.Errorf("host key rotation: %w", err)
		}
	}
	return nil
}

// finishHostRotation promotes this node's pending host key once every
// other registered node of v has acknowledged it, or, with force,
// regardless; it returns the nodes that had not acknowledged it. After a
// promotion it kicks a pass, which re-keys the node's live controllers.
func (pl *Plane) finishHostRotation(ctx context.Context, cli *clientv3.Client, v *clusterView, force bool) ([]string, error) {
	next, ok := pl.cluster.HostPending()
	if !ok {
		return nil, nil
	}
	var others []string
	for _, n := range v.Nodes {
		if n.Name != v.Self {
			others = append(others, n.Name)
		}
	}
	missing, err := volumes.MissingHostKeyAcks(ctx, cli, v.Self, next.Reveal(), others)
	if err != nil || (len(missing) > 0 && !force) {
		return missing, err
	}
	if len(missing) > 0 {
		pl.log.Warn("host key rotation: promoting the new host key without these nodes' acknowledgement; their exports to this node fence when they apply it (its controllers to them reconnect)", "nodes", missing)
	}
	if err := pl.cluster.PromoteHostSecret(ctx); err != nil {
		return missing, err
	}
	pl.kick()
	return missing, nil
}

// rotateHostKey is RotateKeys for the host secret: announce, wait (up to
// rotateWait) until every other node acknowledged and a pass promoted the
// key, else promote it regardless and name the nodes that did not; then
// wait (up to rotateWait) until no live controller of this host presents
// the old key.
func (pl *Plane) rotateHostKey(ctx context.Context) (api.RotateKeysReply, error) {
	if _, err := pl.cluster.RotateHostSecret(ctx); err != nil {
		return api.RotateKeysReply{}, err
	}
	start := time.Now()
	out := api.RotateKeysReply{Rotated: []string{"host"}}
	pl.kick()
	if !waitFor(ctx, rotateWait, func() bool { _, p := pl.cluster.HostPending(); return !p }) {
		cli := pl.cluster.Client()
		pl.loop.mu.Lock()
		v := pl.loop.view
		pl.loop.mu.Unlock()
		if cli == nil || v == nil {
			return out, fmt.Errorf("the new host key is announced but this node has no cluster view to promote it with (it is promoted once every node acknowledged it)")
		}
		missing, err := pl.finishHostRotation(ctx, cli, v, true)
		if err != nil {
			return out, err
		}
		out.NotAcknowledged = missing
	}
	if !waitFor(ctx, rotateWait, pl.rekeyedControllers) {
		return out, fmt.Errorf("the new host key is in force, but controllers of this host still present the old one after %s (each pass re-keys them; see the log)", rotateWait)
	}
	out.Seconds = time.Since(start).Seconds()
	return out, nil
}

// rekeyedControllers says whether every live controller of this node's
// host NQN with a DH-HMAC-CHAP secret presents the host secret in force
// (sysfs dhchap_secret).
func (pl *Plane) rekeyedControllers() bool {
	sec, ok := pl.cluster.HostSecret()
	cs, err := pl.loop.im.Host.Sysfs.Controllers()
	if !ok || err != nil {
		return false
	}
	nqn := pl.mgr.HostNQN()
	return !slices.ContainsFunc(cs, func(c nvmf.Controller) bool {
		return c.HostNQN == nqn && c.DHCHAPSecret != "" && c.DHCHAPSecret.Reveal() != sec.Reveal()
	})
}

// waitFor polls done every 200 ms until it is true (true) or d or ctx
// ends (false).
func waitFor(ctx context.Context, d time.Duration, done func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for !done() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	return true
}
