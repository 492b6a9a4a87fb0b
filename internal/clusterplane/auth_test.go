package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// authTarget is a target backend that only answers the feature probe.
type authTarget struct {
	backend.Backend
	auth bool
}

func (a authTarget) Features(context.Context) (backend.Features, error) {
	return backend.Features{Name: "fake", Auth: a.auth}, nil
}

// TestExportRefusal: the daemon's decision per reconcile. With
// require_auth (the default) a target without DH-HMAC-CHAP refuses, marks
// this node in the view (so this pass's ownership sees it), records it
// for the registry and logs it once, not every reconcile; require_auth =
// false and a target with auth export.
func TestExportRefusal(t *testing.T) {
	for _, tc := range []struct {
		name        string
		auth, allow bool
		state       string
	}{
		{"no auth, require_auth", false, false, model.ExportsRefused},
		{"no auth, require_auth = false", false, true, model.ExportsHostNQN},
		{"auth", true, false, model.ExportsDHCHAP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged strings.Builder
			c := config.Default()
			c.Cluster.RequireAuth = !tc.allow
			d := &Plane{cfg: c, log: slog.New(slog.NewTextHandler(&logged, nil)), loop: newClusterLoop()}
			d.loop.x = &exporter.Exporter{Target: authTarget{auth: tc.auth}}
			for range 3 {
				v := &clusterView{View: plan.View{Self: "a", Nodes: []model.NodeStatus{{Node: model.Node{Name: "a"}}, {Node: model.Node{Name: "b"}}}}}
				err := d.exportRefusal(context.Background(), v)
				if (err != nil) != (tc.state == model.ExportsRefused) || err != nil && !errors.Is(err, exporter.ErrAuthRequired) {
					t.Fatalf("refusal %v, want state %s", err, tc.state)
				}
				if v.Nodes[0].Exports != tc.state || v.Nodes[1].Exports != "" || v.Nodes[0].CannotExport() != (err != nil) {
					t.Fatalf("view nodes %+v, want a marked %s", v.Nodes, tc.state)
				}
			}
			if st, why := d.loop.exportsState(); st != tc.state || (why != "") != (tc.state == model.ExportsRefused) {
				t.Errorf("registry state %q %q", st, why)
			}
			if n := strings.Count(logged.String(), "level="); n != 1 {
				t.Errorf("%d log lines after 3 reconciles, want 1:\n%s", n, logged.String())
			}
			if tc.state == model.ExportsRefused && (!strings.Contains(logged.String(), "level=ERROR msg=\"exports refused") ||
				!strings.Contains(logged.String(), "CONFIG_NVME_TARGET_AUTH") || !strings.Contains(logged.String(), "require_auth = false")) {
				t.Errorf("refusal log lacks the reason and both fixes:\n%s", logged.String())
			}
		})
	}
}

// TestRefusedNodes: volume show names the volume's nodes (owner or
// members) that export nothing, with their reason, and no others.
func TestRefusedNodes(t *testing.T) {
	v := &clusterView{View: plan.View{Nodes: []model.NodeStatus{
		{Node: model.Node{Name: "a"}}, {Node: model.Node{Name: "b", Exports: model.ExportsRefused, ExportsWhy: "why b"}},
		{Node: model.Node{Name: "c", Exports: model.ExportsRefused, ExportsWhy: "why c"}}}}}
	vol := model.Volume{Owner: "a", Members: []model.VolumeMember{{Node: "a"}, {Node: "b"}}}
	if got := refusedNodes(v, vol); len(got) != 1 || got[0] != "b: why b" {
		t.Errorf("refusedNodes = %q, want [b: why b]", got)
	}
}

// TestOwnershipRefusingOwner: a record owner that exports nothing
// acquires no owner key (it could serve the volume to nobody) and says so
// once; once it can export it acquires.
func TestOwnershipRefusingOwner(t *testing.T) {
	f := newOwnerFixture(t)
	var logged strings.Builder
	a := f.node("a")
	a.log = slog.New(slog.NewTextHandler(&logged, nil))
	refusing := func(self string) *clusterView {
		v := f.view(self)
		v.Nodes[0].Exports, v.Nodes[0].ExportsWhy = model.ExportsRefused, "exports refused: no DH-HMAC-CHAP"
		return v
	}
	for range 2 {
		p, err := a.reconcile(f.ctx, f.cli, refusing("a"))
		if err != nil || len(p.Held) != 0 {
			t.Fatalf("refusing a: %+v %v; want nothing held", p, err)
		}
	}
	if ks, err := owner.List(f.ctx, f.cli); err != nil || len(ks) != 0 {
		t.Fatalf("owner keys %v %v, want none", ks, err)
	}
	if n := strings.Count(logged.String(), "not acquired"); n != 1 {
		t.Errorf("%d 'not acquired' lines after two reconciles, want 1:\n%s", n, logged.String())
	}
	if p := f.run(a); p.Held[f.uuid] == 0 {
		t.Fatalf("a able to export: %+v, want v held", p)
	}
}

// TestEnableRBACError: enable-rbac on a client-only node is a conflict
// (409) that says where to run it; external etcd too; other errors pass.
func TestEnableRBACError(t *testing.T) {
	err := enableRBACError(fmt.Errorf("cluster: etcd authentication is enabled from an etcd member: %w", cluster.ErrNotMember))
	if ErrorCode(err) != http.StatusConflict || !strings.Contains(err.Error(), "client-only node") || !strings.Contains(err.Error(), "run fabraid cluster enable-rbac on an etcd member") {
		t.Errorf("client-only node: %d %q", ErrorCode(err), err)
	}
	if err := enableRBACError(cluster.ErrExternal); ErrorCode(err) != http.StatusConflict || !strings.Contains(err.Error(), "external etcd") {
		t.Errorf("external etcd: %d %q", ErrorCode(err), err)
	}
	other := errors.New("etcd down")
	if err := enableRBACError(other); err != other {
		t.Errorf("other error changed: %v", err)
	}
	if enableRBACError(nil) != nil {
		t.Error("nil changed")
	}
}

// TestWithCtrlKeys: the volume manager's plan gets this node's
// controller secret for its exports and each consumer volume's owner's
// for its connections (none for an owner without one).
func TestWithCtrlKeys(t *testing.T) {
	u1, u2 := [16]byte{15: 1, 6: 0x40, 8: 0x80}, [16]byte{15: 2, 6: 0x40, 8: 0x80}
	node := func(name string) model.NodeStatus {
		return model.NodeStatus{Alive: true, Node: model.Node{Name: name, HostNQN: "nqn.h:" + name, StorageAddresses: []string{"10.0.0." + name}}}
	}
	v := &clusterView{View: plan.View{Self: "a", Nodes: []model.NodeStatus{node("a"), node("b"), node("c")},
		Volumes: []model.Volume{
			{UUID: volid.Format(u1), Name: "v1", Owner: "b", State: model.VolumeReady},
			{UUID: volid.Format(u2), Name: "v2", Owner: "c", State: model.VolumeReady},
		},
		CtrlKeys: map[string]nvmf.SecretText{"a": "ctrl-a", "b": "ctrl-b"}}}
	mp := volmgr.ClusterPlan{Consumers: []volmgr.Consumer{{UUID: u1}, {UUID: u2}}}
	withCtrlKeys(&mp, v)
	if mp.CtrlSecret != "ctrl-a" || mp.Consumers[0].CtrlSecret != "ctrl-b" || mp.Consumers[1].CtrlSecret != "" {
		t.Fatalf("own %v, v1 (owner b) %v, v2 (owner c, no key) %v", mp.CtrlSecret == "ctrl-a", mp.Consumers[0].CtrlSecret == "ctrl-b", mp.Consumers[1].CtrlSecret == "")
	}
}
