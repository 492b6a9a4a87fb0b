package clusterplane

import (
	"context"
	"reflect"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// hostTarget is a target backend whose List shows, in each scope, one
// export allowing host nqn with key (no entry when nqn is empty).
type hostTarget struct {
	backend.Backend
	nqn, key string
}

func (h *hostTarget) List(_ context.Context, scope string) ([]backend.Export, error) {
	if h.nqn == "" {
		return nil, nil
	}
	return []backend.Export{{NQN: scope + "x", Hosts: []backend.Host{{NQN: h.nqn, DHCHAPKey: backend.Secret(h.key)}}}}, nil
}

// TestWithHostRotations: another node's pending host key replaces its
// secret in the view's host keys and is an announced rotation by its host
// NQN; this node's own pending key and nodes without one are left alone.
func TestWithHostRotations(t *testing.T) {
	node := func(name string) model.NodeStatus {
		return model.NodeStatus{Node: model.Node{Name: name, HostNQN: "nqn." + name}}
	}
	v := &clusterView{View: plan.View{Self: "a", Nodes: []model.NodeStatus{node("a"), node("b"), node("c")},
		HostKeys: map[string]nvmf.SecretText{"a": "a-old", "b": "b-old", "c": "c-old"}}}
	withHostRotations(v, map[string]model.HostKey{
		"a": {Secret: "a-old", PendingSecret: "a-new"}, "b": {Secret: "b-old", PendingSecret: "b-new"}, "c": {Secret: "c-old"},
	})
	if want := map[string]nvmf.SecretText{"a": "a-old", "b": "b-new", "c": "c-old"}; !reflect.DeepEqual(v.HostKeys, want) {
		t.Errorf("host keys %v, want %v", v.HostKeys, want)
	}
	if want := (exporter.Rekeys{"nqn.b": {Old: "b-old", New: "b-new"}}); !reflect.DeepEqual(v.Rekeys, want) {
		t.Errorf("rekeys %v, want %v", v.Rekeys, want)
	}
}

// TestHostKeyApplied: which target entries acknowledge a pending key.
func TestHostKeyApplied(t *testing.T) {
	h := func(nqn, key string) backend.Host { return backend.Host{NQN: nqn, DHCHAPKey: backend.Secret(key)} }
	for _, c := range []struct {
		name  string
		hosts []backend.Host
		want  bool
	}{
		{"no entry of the host", []backend.Host{h("nqn.c", "old")}, true},
		{"every entry has the new key", []backend.Host{h("nqn.b", "new"), h("nqn.b", "new")}, true},
		{"one entry still has the old key", []backend.Host{h("nqn.b", "new"), h("nqn.b", "old")}, false},
		{"an entry without a key (no DH-HMAC-CHAP)", []backend.Host{h("nqn.b", "")}, true},
	} {
		if got := hostKeyApplied(c.hosts, "nqn.b", "new"); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestHostKeyRotation (real etcd, two planes): n2 announces a new host
// key; n1's view allows n2 with it as an announced rotation; n1
// acknowledges only once its target has it on n2's entries; n2 promotes
// only after that acknowledgement (then its host secret in force is the
// new one, etcd has no pending key and no acknowledgement); a rotation
// nobody acknowledges is promoted only when forced, naming n1.
func TestHostKeyRotation(t *testing.T) {
	ctx := testCtx(t)
	p1, p2 := twoPlanes(t)
	old, _ := p2.cluster.HostSecret()
	if _, err := p2.cluster.RotateHostSecret(ctx); err != nil {
		t.Fatal(err)
	}
	next, _ := p2.cluster.HostPending()
	view := func(pl *Plane) *clusterView {
		t.Helper()
		v, err := readView(ctx, pl.cluster.Client(), pl.cfg.NodeName)
		if err == nil {
			err = pl.readCtrlKeys(ctx, pl.cluster.Client(), v)
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v1 := view(p1)
	nqn2 := p2.mgr.HostNQN()
	if v1.HostKeys["n2"].Reveal() != next.Reveal() || v1.Rekeys[nqn2] != (exporter.Rekey{Old: nvmf.SecretText(old.Reveal()), New: nvmf.SecretText(next.Reveal())}) {
		t.Fatalf("n1's view: n2's key is the pending one %v, rotation %v", v1.HostKeys["n2"].Reveal() == next.Reveal(), v1.Rekeys[nqn2] != exporter.Rekey{})
	}
	if in := p1.exporterInput(v1, nil, nil); !reflect.DeepEqual(in.Rekeys, v1.Rekeys) {
		t.Fatal("the drive exporter's input lacks the announced rotation")
	}
	ht := &hostTarget{nqn: nqn2, key: old.Reveal()}
	p1.loop.x = &exporter.Exporter{Target: ht}
	v2 := view(p2)
	step := func(what string, promoted bool) {
		t.Helper()
		if err := p1.ackHostKeys(ctx, p1.cluster.Client(), v1); err != nil {
			t.Fatal(err)
		}
		if _, err := p2.finishHostRotation(ctx, p2.cluster.Client(), v2, false); err != nil {
			t.Fatal(err)
		}
		cur, _ := p2.cluster.HostSecret()
		if _, pending := p2.cluster.HostPending(); pending == promoted || (cur.Reveal() == next.Reveal()) != promoted {
			t.Fatalf("%s: pending %v, new key in force %v; want promoted %v", what, pending, cur.Reveal() == next.Reveal(), promoted)
		}
	}
	step("n1's target has the old key", false)
	ht.key = next.Reveal()
	step("n1's target has the new key", true)
	recs, err := volumes.HostKeyRecords(ctx, p2.cluster.Client())
	if err != nil || recs["n2"].Secret != next.Reveal() || recs["n2"].PendingSecret != "" {
		t.Fatalf("etcd after the promotion: new secret %v, no pending %v (%v)", recs["n2"].Secret == next.Reveal(), recs["n2"].PendingSecret == "", err)
	}
	if m, err := volumes.MissingHostKeyAcks(ctx, p2.cluster.Client(), "n2", next.Reveal(), []string{"n1"}); err != nil || len(m) != 1 {
		t.Errorf("acknowledgements left after the promotion: missing %v (%v)", m, err)
	}

	// Nobody acknowledges: promoted only when forced, naming n1.
	if _, err := p2.cluster.RotateHostSecret(ctx); err != nil {
		t.Fatal(err)
	}
	third, _ := p2.cluster.HostPending()
	if m, err := p2.finishHostRotation(ctx, p2.cluster.Client(), v2, false); err != nil || !reflect.DeepEqual(m, []string{"n1"}) {
		t.Fatalf("unforced without acknowledgement: missing %v, %v", m, err)
	}
	if _, pending := p2.cluster.HostPending(); !pending {
		t.Fatal("promoted without acknowledgement")
	}
	if m, err := p2.finishHostRotation(ctx, p2.cluster.Client(), v2, true); err != nil || !reflect.DeepEqual(m, []string{"n1"}) {
		t.Fatalf("forced: missing %v, %v", m, err)
	}
	if cur, _ := p2.cluster.HostSecret(); cur.Reveal() != third.Reveal() {
		t.Error("forced promotion: the new key is not in force")
	}
}
