package clusterplane

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/fence"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestOwnershipTakeover runs the ownership step of three nodes' reconciles
// against a real etcd: only the record owner acquires and runs the volume
// (the others stop it); when a's session ends (its engines freeze) and a
// is dead, the node plan.ChooseOwner picks CASes the record, acquires a
// larger epoch and runs it, the third node does not; a, back with a new
// session, runs nothing and does not take the volume back.
// ownerFixture is one volume "v" (2+1 on a, b, c, record owner a) in a
// real etcd, with the ownership step of each node and a view of it.
type ownerFixture struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	uuid   string
	u      [16]byte
	rec    model.Volume
	frozen atomic.Int32
	alive  map[string]bool
}

func newOwnerFixture(t *testing.T) *ownerFixture {
	f := &ownerFixture{t: t, ctx: context.Background(), cli: etcdtest.Start(t), uuid: "5e3c1f00-0000-4000-8000-000000000001",
		alive: map[string]bool{"a": true, "b": true, "c": true}}
	f.u, _ = volid.ParseUUID(f.uuid)
	f.rec = model.Volume{UUID: f.uuid, Name: "v", K: 2, M: 1, Groups: 1, Owner: "a", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"a", "b", "c"} {
		f.rec.Members = append(f.rec.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d1"})
	}
	if err := volumes.Create(f.ctx, f.cli, f.rec); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *ownerFixture) node(name string) *ownership {
	o := newOwnership(name, owner.DefaultTTL, slog.New(slog.DiscardHandler), func() error { f.frozen.Add(1); return nil }, func() {})
	f.t.Cleanup(func() { o.close(f.ctx) })
	return o
}

func (f *ownerFixture) view(self string) *clusterView {
	vs, err := volumes.List(f.ctx, f.cli)
	if err != nil {
		f.t.Fatal(err)
	}
	v := &clusterView{View: plan.View{Self: self, Volumes: vs}}
	for _, n := range []string{"a", "b", "c"} {
		v.Nodes = append(v.Nodes, model.NodeStatus{Node: model.Node{Name: n, StorageAddresses: []string{"10.0.0." + n}}, Alive: f.alive[n]})
	}
	return v
}

func (f *ownerFixture) run(o *ownership) ownerPlan {
	f.t.Helper()
	p, err := o.reconcile(f.ctx, f.cli, f.view(o.self))
	if err != nil {
		f.t.Fatalf("%s: %v", o.self, err)
	}
	return p
}

func (f *ownerFixture) stops(p ownerPlan) bool { return len(p.Stop) == 1 && p.Stop[0] == f.u }

func TestOwnershipTakeover(t *testing.T) {
	f := newOwnerFixture(t)
	ctx, cli, uuid, rec := f.ctx, f.cli, f.uuid, f.rec
	node, run, stops, view, alive, frozen := f.node, f.run, f.stops, f.view, f.alive, &f.frozen
	a, b, c := node("a"), node("b"), node("c")
	// b first: the record owner a has not acquired yet; it waits (a is
	// alive, the grace has not passed).
	if p := run(b); len(p.Held) != 0 || len(p.Stop) != 0 {
		t.Fatalf("b before a acquired: %+v, want nothing held and nothing stopped (no key: an engine stays as it is)", p)
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

// TestOwnershipLapse: an owner whose session ends (its lease revoked or
// expired) while its alive key still lasts is taken over at once: the
// node that saw its key marks it dead for the pass (its members gone, no
// new connections) and does not wait for its fence acknowledgement. A key
// resigned under a live lease is no lapse: nobody takes the volume over
// while its record owner is alive.
func TestOwnershipLapse(t *testing.T) {
	f := newOwnerFixture(t)
	a, b := f.node("a"), f.node("b")
	var waited [][]string
	b.wait = func(_ context.Context, _ *clientv3.Client, _ string, _ uint64, exporters []string) error {
		waited = append(waited, exporters)
		return nil
	}
	e1 := f.run(a).Held[f.uuid]
	if p := f.run(b); len(p.Held) != 0 || !f.stops(p) {
		t.Fatalf("b while a holds v: %+v", p)
	}
	// A resign under a live lease: b does not take over.
	if err := owner.Resign(f.ctx, f.cli, f.uuid, owner.Epoch(e1)); err != nil {
		t.Fatal(err)
	}
	if p := f.run(b); len(p.Held) != 0 {
		t.Fatalf("b took v over after a resigned under a live lease: %+v", p)
	}
	e1 = f.run(a).Held[f.uuid]
	f.run(b)
	// a's session ends; its alive key is still there.
	a.close(f.ctx)
	v := f.view("b")
	p, err := b.reconcile(f.ctx, f.cli, v)
	if err != nil {
		t.Fatal(err)
	}
	if p.Held[f.uuid] <= e1 {
		t.Fatalf("b after a's lease ended: %+v, want v held at an epoch > %d", p, e1)
	}
	if n, _ := v.node("a"); !n.Alive {
		t.Errorf("a is dead in b's view after its owner session ended: only the takeover decision counts it dead (its members may be needed)")
	}
	if len(waited) != 1 || len(waited[0]) != 1 || waited[0][0] != "c" {
		t.Errorf("fence waited for %v, want [[c]] (not the lapsed old owner)", waited)
	}
}

// TestOwnershipFencePending: while the storage fence of a held key is not
// acknowledged, or the key is not acquired yet, the volume is neither run
// nor stopped here: an engine of it (frozen by a self-fence) keeps its
// export, so its consumers keep their path. Only another node's key stops
// it.
func TestOwnershipFencePending(t *testing.T) {
	f := newOwnerFixture(t)
	a := f.node("a")
	fenced := errors.New("not acknowledged")
	a.wait = func(context.Context, *clientv3.Client, string, uint64, []string) error { return fenced }
	p, err := a.reconcile(f.ctx, f.cli, f.view("a"))
	if !errors.Is(err, fenced) || len(p.Held) != 0 || len(p.Stop) != 0 {
		t.Fatalf("a with its fence pending: %+v %v, want nothing held, nothing stopped, the fence error", p, err)
	}
	a.wait = func(context.Context, *clientv3.Client, string, uint64, []string) error { return nil }
	if p := f.run(a); p.Held[f.uuid] == 0 || len(p.Stop) != 0 {
		t.Fatalf("a once fenced: %+v, want v held", p)
	}
}

// TestUnfencedMembers: b holds v at a new epoch after a's owner session
// lapsed while a's alive key lasts. Until a's drive exporter acknowledges
// that epoch, a's members are gone for v (not waited for by the
// assembly, not newly connected); once it does, or when a is no longer
// lapsed, they are wanted again. c (not lapsed) is never unfenced.
func TestUnfencedMembers(t *testing.T) {
	f := newOwnerFixture(t)
	b := f.node("b")
	const epoch = 7
	view := func() *clusterView {
		v := f.view("b")
		v.Held = map[string]uint64{f.uuid: epoch}
		v.Unfenced = b.unfenced(f.ctx, f.cli, v)
		return v
	}
	aGone := func(v *clusterView) (gone, keepOnly bool) {
		imp := plan.ImporterInput(v.View, nvmf.HostIdentity{}, map[string]string{"b-d1": "/dev/b1"})
		mp := managerPlan(v, imp, imp.Paths(importer.Result{}))
		if len(mp.Volumes) != 1 {
			t.Fatalf("manager plan: %d volumes, want 1", len(mp.Volumes))
		}
		gone = slices.Contains(mp.Volumes[0].Gone, 0)
		if slices.Contains(mp.Volumes[0].Gone, 2) {
			t.Fatalf("c's member gone: %v", mp.Volumes[0].Gone)
		}
		for _, r := range imp.Input.Remotes {
			if r.NQN == exporter.NQN("a-d1") {
				keepOnly = r.KeepOnly
			}
		}
		return gone, keepOnly
	}
	if v := view(); v.Unfenced != nil {
		t.Fatalf("nothing lapsed: unfenced %v", v.Unfenced)
	}
	b.lapsed["a"] = time.Now()
	lease, err := f.cli.Grant(f.ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Ack(f.ctx, f.cli, lease.ID, f.uuid, "a", 3, "a"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Ack(f.ctx, f.cli, lease.ID, f.uuid, "c", epoch, "b"); err != nil {
		t.Fatal(err)
	}
	v := view()
	if got := v.Unfenced[f.uuid]; !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a lapsed, its ack of epoch 3: unfenced %v, want [a]", got)
	}
	if gone, keep := aGone(v); !gone || !keep {
		t.Fatalf("a unfenced: slot 0 gone %v, keep-only %v; want both", gone, keep)
	}
	if err := fence.Ack(f.ctx, f.cli, lease.ID, f.uuid, "a", epoch, "b"); err != nil {
		t.Fatal(err)
	}
	v = view()
	if len(v.Unfenced) != 0 {
		t.Fatalf("a acknowledged epoch %d: unfenced %v, want none", epoch, v.Unfenced)
	}
	if gone, keep := aGone(v); gone || keep {
		t.Fatalf("a fenced for the epoch: slot 0 gone %v, keep-only %v; want neither", gone, keep)
	}
}
