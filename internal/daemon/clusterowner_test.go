package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// TestOwnershipTakeover runs the ownership step of three nodes' reconciles
// against a real etcd: only the record owner acquires and runs the volume
// (the others stop it); when a's session ends (its engines freeze) and a
// is dead, the node plan.ChooseOwner picks CASes the record, acquires a
// larger epoch and runs it, the third node does not; a, back with a new
// session, runs nothing and does not take the volume back.
func TestOwnershipTakeover(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	const uuid = "5e3c1f00-0000-4000-8000-000000000001"
	u, _ := volmgr.ParseUUID(uuid)
	rec := model.Volume{UUID: uuid, Name: "v", K: 2, M: 1, Groups: 1, Owner: "a", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"a", "b", "c"} {
		rec.Members = append(rec.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d1"})
	}
	if err := volumes.Create(ctx, cli, rec); err != nil {
		t.Fatal(err)
	}
	var frozen atomic.Int32
	node := func(name string) *ownership {
		o := newOwnership(name, slog.New(slog.DiscardHandler), func() error { frozen.Add(1); return nil }, func() {})
		t.Cleanup(func() { o.close(ctx) })
		return o
	}
	alive := map[string]bool{"a": true, "b": true, "c": true}
	view := func(self string) *clusterView {
		vs, err := volumes.List(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		v := &clusterView{View: plan.View{Self: self, Volumes: vs}}
		for _, n := range []string{"a", "b", "c"} {
			v.Nodes = append(v.Nodes, model.NodeStatus{Node: model.Node{Name: n, StorageAddresses: []string{"10.0.0." + n}}, Alive: alive[n]})
		}
		return v
	}
	run := func(o *ownership) ownerPlan {
		t.Helper()
		p, err := o.reconcile(ctx, cli, view(o.self))
		if err != nil {
			t.Fatalf("%s: %v", o.self, err)
		}
		return p
	}
	stops := func(p ownerPlan) bool { return len(p.Stop) == 1 && p.Stop[0] == u }

	a, b, c := node("a"), node("b"), node("c")
	// b and c first: the record owner a has not acquired yet; they wait
	// (a is alive, the grace has not passed).
	if p := run(b); len(p.Held) != 0 || !stops(p) {
		t.Fatalf("b before a acquired: %+v, want nothing held, v stopped", p)
	}
	pa := run(a)
	e1 := pa.Held[uuid]
	if e1 == 0 || len(pa.Stop) != 0 {
		t.Fatalf("a: %+v, want v held", pa)
	}
	if p := run(c); len(p.Held) != 0 || !stops(p) {
		t.Fatalf("c while a holds v: %+v", p)
	}
	// a's daemon goes (its session closes: engines frozen, lease
	// revoked) and a is dead.
	a.close(ctx)
	if frozen.Load() != 1 {
		t.Fatalf("a's engines frozen %d times at its session's end, want 1", frozen.Load())
	}
	alive["a"] = false
	want := plan.ChooseOwner(view("b").View, rec)
	if want != "b" {
		t.Fatalf("ChooseOwner = %q, want b (fewest owned, smallest name)", want)
	}
	if p := run(c); len(p.Held) != 0 {
		t.Fatalf("c took v over although b is the choice: %+v", p)
	}
	pb := run(b)
	e2 := pb.Held[uuid]
	if e2 <= e1 || len(pb.Stop) != 0 {
		t.Fatalf("b's takeover: %+v, want v held at an epoch > %d", pb, e1)
	}
	got, _, _, err := volumes.Get(ctx, cli, uuid)
	if err != nil || got.Owner != "b" {
		t.Fatalf("record owner after the takeover: %q %v, want b", got.Owner, err)
	}
	if k, ep, ok, err := owner.Current(ctx, cli, uuid); err != nil || !ok || k.Node != "b" || uint64(ep) != e2 {
		t.Fatalf("owner key: %+v %d %v %v", k, ep, ok, err)
	}
	// a comes back with a new session: it runs nothing, takes nothing.
	alive["a"] = true
	a2 := node("a")
	if p := run(a2); len(p.Held) != 0 || !stops(p) {
		t.Fatalf("a back: %+v, want v stopped, nothing held", p)
	}
	if p := run(b); p.Held[uuid] != e2 {
		t.Fatalf("b after a's return: %+v", p)
	}
}
