package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/registry"
)

// TestDownRecord: a node is recorded down only while its alive key is
// absent and only once (the first time is kept); its record is cleared
// only while its alive key exists, and goes with the node's record.
func TestDownRecord(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	if _, err := registry.Register(ctx, cli, registry.Node{Name: "n1", HostNQN: "nqn.n1"}, t0); err != nil {
		t.Fatal(err)
	}
	downSince := func() time.Time {
		t.Helper()
		s, ok, err := registry.Get(ctx, cli, "n1")
		if err != nil || !ok {
			t.Fatalf("n1: %v %v", ok, err)
		}
		return s.DownSince
	}
	if ok, err := registry.MarkDown(ctx, cli, "nobody", "n2", t0); ok || err != nil {
		t.Fatalf("mark of an unknown node: %v %v", ok, err)
	}
	hb, err := registry.StartHeartbeat(ctx, cli, "n1", 30, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := registry.MarkDown(ctx, cli, "n1", "n2", t0); ok || err != nil || !downSince().IsZero() {
		t.Fatalf("mark of an alive node: %v %v, down since %v", ok, err, downSince())
	}
	if err := hb.Close(ctx); err != nil { // revokes the lease: dead at once
		t.Fatal(err)
	}
	if ok, err := registry.MarkDown(ctx, cli, "n1", "n2", t0); !ok || err != nil || !downSince().Equal(t0) {
		t.Fatalf("mark of a dead node: %v %v, down since %v", ok, err, downSince())
	}
	if ok, err := registry.MarkDown(ctx, cli, "n1", "n3", t0.Add(time.Hour)); ok || err != nil || !downSince().Equal(t0) {
		t.Fatalf("second mark: %v %v, down since %v (the first time must stay)", ok, err, downSince())
	}
	if ok, err := registry.ClearDown(ctx, cli, "n1"); ok || err != nil || downSince().IsZero() {
		t.Fatalf("clear while still dead: %v %v", ok, err)
	}
	if hb, err = registry.StartHeartbeat(ctx, cli, "n1", 30, 1, t0); err != nil {
		t.Fatal(err)
	}
	defer hb.Close(ctx)
	if ok, err := registry.ClearDown(ctx, cli, "n1"); !ok || err != nil || !downSince().IsZero() {
		t.Fatalf("clear once back: %v %v, down since %v", ok, err, downSince())
	}
	if err := hb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := registry.MarkDown(ctx, cli, "n1", "n2", t0); !ok {
		t.Fatal("mark after the second death")
	}
	if err := registry.Delete(ctx, cli, "n1"); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, "/fabraid/v1/down/n1"); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("down record after the node's removal: %v %v", r.Kvs, err)
	}
}
