package clusterplane

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volid"
)

// handoverManager records what the hand-over asks of the volume manager.
type handoverManager struct {
	running map[[16]byte]bool
	calls   []string
}

func (m *handoverManager) DrainEngine(_ context.Context, u [16]byte) (time.Duration, error) {
	m.calls = append(m.calls, "drain")
	return time.Second, nil
}

func (m *handoverManager) SetANAState(_ context.Context, u [16]byte, state string) error {
	m.calls = append(m.calls, "ana "+state)
	return nil
}

func (m *handoverManager) Running(u [16]byte) bool { return m.running[u] }

// TestOwnershipHandover runs a planned move through the ownership steps
// of the old owner a, the target b and a bystander c against a real etcd:
// the move is one transaction (record owner b, move record requested);
// b prepares (imports the members, runs nothing) while a keeps running
// the volume; once b's record says prepared, a drains it, releases its
// member imports (record released), resigns (phase
// resigned) and keeps its export (Keep, never Stop) while b has not
// acquired, while b's status is not at its epoch and exported, and while
// c's published paths show only a's address; then a stops the volume and
// the move is done with b's epoch. A second move while one is under way
// is refused.
func TestOwnershipHandover(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	const uuid = "5e3c1f00-0000-4000-8000-000000000002"
	var u [16]byte
	u, _ = volid.ParseUUID(uuid)
	rec := model.Volume{UUID: uuid, Name: "v", K: 2, M: 1, Groups: 1, Owner: "a", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"a", "b", "c"} {
		rec.Members = append(rec.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d1"})
	}
	if err := volumes.Create(ctx, cli, rec); err != nil {
		t.Fatal(err)
	}
	fenceWaits := map[string]int{}
	node := func(name string) *ownership {
		o := newOwnership(name, owner.DefaultTTL, slog.New(slog.DiscardHandler), func() error { return nil }, func() {})
		o.wait = func(context.Context, *clientv3.Client, string, uint64, []string) error {
			fenceWaits[name]++
			return nil
		}
		t.Cleanup(func() { o.close(ctx) })
		return o
	}
	status := map[string]model.VolumeStatus{}
	paths := map[string]model.NodePaths{}
	view := func(self string) *clusterView {
		v := moveView(t, cli, self)
		v.Status, v.Paths = status, paths
		return v
	}
	mgr := map[string]*handoverManager{}
	run := func(o *ownership) ownerPlan {
		t.Helper()
		v := view(o.self)
		p, err := o.reconcile(ctx, cli, v)
		if err != nil {
			t.Fatalf("%s: %v", o.self, err)
		}
		m := mgr[o.self]
		if m == nil {
			m = &handoverManager{running: map[[16]byte]bool{}}
			mgr[o.self] = m
		}
		if _, ok := p.Held[uuid]; ok {
			m.running[u] = true
		}
		if slices.Contains(p.Stop, u) {
			m.running[u] = false
		}
		if errs := o.afterReconcile(ctx, cli, v, p, m); len(errs) > 0 {
			t.Fatalf("%s after reconcile: %v", o.self, errs)
		}
		return p
	}
	keeps := func(p ownerPlan) bool { return slices.Contains(p.Keep, u) && !slices.Contains(p.Stop, u) }
	phase := func() model.Move {
		t.Helper()
		m, _, ok, err := volumes.GetMove(ctx, cli, uuid)
		if err != nil || !ok {
			t.Fatalf("move record: %v %v", ok, err)
		}
		return m.Move
	}

	a, b, c := node("a"), node("b"), node("c")
	e1 := owner.Epoch(run(a).Held[uuid])
	if e1 == 0 {
		t.Fatal("a does not hold v")
	}
	run(b)
	run(c)
	// The move, as the API asks for it (from c).
	v := view("c")
	ks, _ := owner.List(ctx, cli)
	now := time.Now().UTC()
	m := model.Move{Volume: uuid, To: "b", Epoch: uint64(ks[uuid].Epoch), Phase: model.MoveRequested, Asked: now, Updated: now}
	check := func(cur model.Volume, cm *model.Move) error {
		return checkMove(cur, v.Nodes, "b", ks[uuid].Node, cm, time.Now())
	}
	if _, err := volumes.StartMove(ctx, cli, m, check); err != nil {
		t.Fatal(err)
	}
	if _, err := volumes.StartMove(ctx, cli, model.Move{Volume: uuid, To: "c", Phase: model.MoveRequested, Updated: now}, func(cur model.Volume, cm *model.Move) error {
		return checkMove(cur, v.Nodes, "c", "b", cm, time.Now())
	}); err == nil || !strings.Contains(err.Error(), "already under way") {
		t.Fatalf("second move while one is under way: %v", err)
	}
	// b cannot acquire while a holds the key: it prepares.
	if p := run(b); len(p.Held) != 0 || !slices.Equal(p.Prepare, []string{uuid}) || !slices.Contains(p.Stop, u) {
		t.Fatalf("b before a resigned: %+v", p)
	}
	// a serves on while b imports the members.
	if p := run(a); p.Held[uuid] != uint64(e1) || len(p.Drain) != 0 || len(mgr["a"].calls) != 0 {
		t.Fatalf("a while b prepares: %+v, manager calls %v", p, mgr["a"].calls)
	}
	if errs := b.markPrepared(ctx, cli, []string{uuid}); len(errs) > 0 || !phase().Prepared {
		t.Fatalf("b's prepared mark: %v, record %+v", errs, phase())
	}
	// a: runs it this pass, drains after the manager's reconcile, ends
	// its member imports and resigns.
	var released []string
	a.release = func(_ context.Context, vol model.Volume) error { released = append(released, vol.UUID); return nil }
	pa := run(a)
	if pa.Held[uuid] != uint64(e1) || pa.Drain[uuid] != e1 || slices.Contains(pa.Stop, u) {
		t.Fatalf("a's drain pass: %+v", pa)
	}
	if got := strings.Join(mgr["a"].calls, ","); got != "drain" {
		t.Fatalf("a's manager calls %q, want drain", got)
	}
	if _, _, ok, _ := owner.Current(ctx, cli, uuid); ok {
		t.Fatal("a did not resign the owner key")
	}
	if ph := phase(); ph.Phase != model.MoveResigned || !ph.Released || !slices.Equal(released, []string{uuid}) {
		t.Fatalf("move record %+v after the resign (released %v), want resigned and released", ph, released)
	}
	// a keeps its export until b serves and c has b's path.
	if p := run(a); !keeps(p) || len(p.Held) != 0 {
		t.Fatalf("a before b acquired: %+v", p)
	}
	// b, prepared, acquires on the key's deletion (the watch), without
	// the storage fence: a released its imports.
	b.noteTargets(view("b"), []string{uuid}, nil)
	b.acquireOnResign(cli, uuid)
	if rec, _, ok, _ := owner.Current(ctx, cli, uuid); !ok || rec.Node != "b" {
		t.Fatalf("b did not acquire on a's resign: owner %+v, %v", rec, ok)
	}
	pb := run(b)
	e2 := pb.Held[uuid]
	if e2 <= uint64(e1) || fenceWaits["b"] != 0 {
		t.Fatalf("b's acquire: %+v, want an epoch > %d without a fence wait (%d waits)", pb, e1, fenceWaits["b"])
	}
	if p := run(a); !keeps(p) {
		t.Fatalf("a while b publishes no status: %+v", p)
	}
	status[uuid] = model.VolumeStatus{UUID: uuid, Owner: "b", State: "optimal", Epoch: e2}
	if p := run(a); !keeps(p) {
		t.Fatalf("a while b's export is not applied: %+v", p)
	}
	status[uuid] = model.VolumeStatus{UUID: uuid, Owner: "b", State: "optimal", Epoch: e2, Exported: true}
	live := func(addrs ...string) model.NodePaths {
		var ps []model.Path
		for _, a := range addrs {
			ps = append(ps, model.Path{Address: a, State: "live"})
		}
		return model.NodePaths{Volumes: map[string][]model.Path{uuid: ps}}
	}
	paths["a"], paths["b"], paths["c"] = live("10.0.0.b"), live("10.0.0.b"), live("10.0.0.a")
	if p := run(a); !keeps(p) {
		t.Fatalf("a while c has only a's path: %+v", p)
	}
	paths["c"] = live("10.0.0.a", "10.0.0.b")
	pa = run(a)
	if !slices.Contains(pa.Stop, u) || !slices.Contains(pa.Finish, uuid) {
		t.Fatalf("a once b serves and every node has b's path: %+v", pa)
	}
	got := phase()
	if got.Phase != model.MoveDone || got.ToEpoch != e2 || got.From != "a" || got.To != "b" {
		t.Fatalf("move record at the end: %+v", got)
	}
	if len(a.handing) != 0 {
		t.Fatalf("a still hands over: %+v", a.handing)
	}
	// A next move is accepted (b holds the key now).
	ks, _ = owner.List(ctx, cli)
	v = view("c")
	if _, err := volumes.StartMove(ctx, cli, model.Move{Volume: uuid, To: "a", Epoch: uint64(ks[uuid].Epoch), Phase: model.MoveRequested, Updated: time.Now()}, func(cur model.Volume, cm *model.Move) error {
		return checkMove(cur, v.Nodes, "a", ks[uuid].Node, cm, time.Now())
	}); err != nil {
		t.Fatalf("move back after the first is done: %v", err)
	}
}
