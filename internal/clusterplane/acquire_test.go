package clusterplane

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// TestCleanAcquire: a planned move's target b, the record owner, finds
// the owner key free after a's resign. It runs the volume without the
// storage fence only when the hand-over was clean (b prepared, a
// released) and the records did not change since; else it waits for the
// fence as any acquire. The watch's acquire on the resign takes only a
// volume b prepared in a pass, whose move to b is not over.
func TestCleanAcquire(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	for i, c := range []struct {
		name     string
		move     model.Move
		after    func(t *testing.T, uuid string) // before b's pass
		wantWait bool
	}{
		{"prepared, released: no fence", model.Move{Prepared: true, Released: true}, nil, false},
		{"prepared, a did not release: fence", model.Move{Prepared: true}, nil, true},
		{"released, b not prepared: fence", model.Move{Released: true}, nil, true},
		{"the record written after the move record: fence", model.Move{Prepared: true, Released: true}, func(t *testing.T, uuid string) {
			if _, err := volumes.Modify(ctx, cli, uuid, func(v *model.Volume) error { v.Attach = &model.AttachList{Nodes: []string{"a", "b", "c"}}; return nil }); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			uuid := fmt.Sprintf("5e3c1f00-0000-4000-8000-00000000010%d", i)
			startMoveToB(t, cli, uuid, c.move)
			if c.after != nil {
				c.after(t, uuid)
			}
			waits := 0
			b := newOwnership("b", owner.DefaultTTL, slog.New(slog.DiscardHandler), func() error { return nil }, func() {})
			b.wait = func(context.Context, *clientv3.Client, string, uint64, []string) error { waits++; return nil }
			t.Cleanup(func() { b.close(ctx) })
			p, err := b.reconcile(ctx, cli, moveView(t, cli, "b"))
			if err != nil {
				t.Fatal(err)
			}
			if p.Held[uuid] == 0 || (waits > 0) != c.wantWait {
				t.Fatalf("b's pass: held %v, %d fence waits, want a wait: %v", p.Held, waits, c.wantWait)
			}
			// The next pass keeps it without another wait.
			before := waits
			if p, err := b.reconcile(ctx, cli, moveView(t, cli, "b")); err != nil || p.Held[uuid] == 0 || waits != before {
				t.Fatalf("b's next pass: held %v, %v, %d more fence waits", p.Held, err, waits-before)
			}
		})
	}
	t.Run("the old owner writes the phase between the reads and the transaction: read again", func(t *testing.T) {
		uuid := "5e3c1f00-0000-4000-8000-000000000111"
		startMoveToB(t, cli, uuid, model.Move{Prepared: true, Released: true})
		b := newOwnership("b", owner.DefaultTTL, slog.New(slog.DiscardHandler), func() error { return nil }, func() {})
		t.Cleanup(func() { b.close(ctx) })
		s, err := b.session(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		writes := 0
		b.early.beforeTxn = func() {
			if writes++; writes > 1 {
				return
			}
			sm, rev, _, err := volumes.GetMove(ctx, cli, uuid)
			if err == nil {
				sm.Updated = time.Now().UTC()
				err = volumes.UpdateMove(ctx, cli, rev, sm.Move)
			}
			if err != nil {
				t.Error(err)
			}
		}
		if e, why, err := b.cleanAcquire(ctx, cli, s, uuid); err != nil || why != "" || e == 0 {
			t.Fatalf("clean acquire with the move record written once in between: epoch %d, %q, %v", e, why, err)
		}
	})
	t.Run("the watch's acquire takes only a prepared target", func(t *testing.T) {
		uuid := "5e3c1f00-0000-4000-8000-000000000110"
		startMoveToB(t, cli, uuid, model.Move{Prepared: true, Released: true})
		b := newOwnership("b", owner.DefaultTTL, slog.New(slog.DiscardHandler), func() error { return nil }, func() {})
		t.Cleanup(func() { b.close(ctx) })
		if _, err := b.session(ctx, cli); err != nil {
			t.Fatal(err)
		}
		b.acquireOnResign(cli, uuid)
		if _, _, ok, _ := owner.Current(ctx, cli, uuid); ok {
			t.Fatal("acquired a volume b did not prepare in its last pass")
		}
		b.noteTargets(moveView(t, cli, "b"), []string{uuid}, nil)
		// A pass that saw the key gone before the watch told of it
		// decides Acquire, not Prepare: the volume stays a target.
		b.noteTargets(moveView(t, cli, "b"), nil, nil)
		b.acquireOnResign(cli, uuid)
		if rec, _, ok, _ := owner.Current(ctx, cli, uuid); !ok || rec.Node != "b" {
			t.Fatalf("b prepared it: owner %+v, %v, want b", rec, ok)
		}
	})
}

// startMoveToB creates volume uuid owned by a over a, b and c, without
// an owner key, and moves it to b with move record m's flags.
func startMoveToB(t *testing.T, cli *clientv3.Client, uuid string, m model.Move) {
	t.Helper()
	ctx := context.Background()
	rec := model.Volume{UUID: uuid, Name: "v" + uuid[len(uuid)-3:], K: 2, M: 1, Groups: 1, Owner: "a", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"a", "b", "c"} {
		rec.Members = append(rec.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-" + uuid[len(uuid)-3:]})
	}
	if err := volumes.Create(ctx, cli, rec); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	m.Volume, m.To, m.Epoch, m.Phase, m.Asked, m.Updated = uuid, "b", 7, model.MoveResigned, now, now
	if _, err := volumes.StartMove(ctx, cli, m, func(model.Volume, *model.Move) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// moveView is the view of node self: every volume and move record, nodes
// a, b and c alive.
func moveView(t *testing.T, cli *clientv3.Client, self string) *clusterView {
	t.Helper()
	ctx := context.Background()
	vs, err := volumes.List(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := volumes.ListMoves(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	v := &clusterView{View: plan.View{Self: self, Volumes: vs}, Moves: ms}
	for _, n := range []string{"a", "b", "c"} {
		v.Nodes = append(v.Nodes, model.NodeStatus{Node: model.Node{Name: n, StorageAddresses: []string{"10.0.0." + n}}, Alive: true})
	}
	return v
}
