package clusterplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// TestSubmitReprotect: re-protection moves the slot in etcd with a
// replace request only while the record still names this node as owner
// and the old member in the slot (compare-and-swap against real etcd):
// a second decision made from the same, now stale, record changes
// nothing, and neither does one for a volume another node owns now.
func TestSubmitReprotect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := initPlane(t, "n1")
	cli := d.cluster.Client()
	rec := model.Volume{UUID: "00000000-0000-4000-8000-000000000001", Name: "v", K: 2, M: 1, Groups: 1, Owner: "n1", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"n1", "n2", "n3"} {
		rec.Members = append(rec.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d0", UUID: fmt.Sprintf("00000000-0000-4000-8000-0000000001%02d", i)})
	}
	if err := volumes.Create(ctx, cli, rec); err != nil {
		t.Fatal(err)
	}
	v := &clusterView{}
	v.Self = "n1"
	to := model.VolumeMember{Slot: 2, Node: "n4", Domain: "n4", Drive: "n4-d0"}
	if err := d.submitReprotect(ctx, cli, v, rec, to, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, _, _, err := volumes.Get(ctx, cli, rec.UUID)
	if err != nil || got.Members[2] != to {
		t.Fatalf("slot 2 after re-protection: %+v %v", got.Members, err)
	}
	rs, err := volumes.Requests(ctx, cli)
	if err != nil || len(rs) != 1 || rs[0].Op != "replace" || rs[0].Slot != 2 || rs[0].Node != "n4" || rs[0].Drive != "n4-d0" || rs[0].State != model.RequestPending {
		t.Fatalf("requests: %+v %v", rs, err)
	}
	// The same decision from the stale record: refused, nothing written.
	to2 := model.VolumeMember{Slot: 2, Node: "n4", Domain: "n4", Drive: "n4-d1"}
	if err := d.submitReprotect(ctx, cli, v, rec, to2, time.Minute); err == nil || !strings.Contains(err.Error(), "slot 2 changed meanwhile") {
		t.Errorf("stale decision: %v", err)
	}
	// Another owner now.
	if _, err := volumes.Modify(ctx, cli, rec.UUID, func(r *model.Volume) error { r.Owner = "n2"; return nil }); err != nil {
		t.Fatal(err)
	}
	got, _, _, _ = volumes.Get(ctx, cli, rec.UUID)
	if err := d.submitReprotect(ctx, cli, v, got, model.VolumeMember{Slot: 1, Node: "n4", Domain: "n4", Drive: "n4-d1"}, time.Minute); err == nil || !strings.Contains(err.Error(), "owned by n2 now") {
		t.Errorf("decision for a volume n2 owns: %v", err)
	}
	if rs, _ := volumes.Requests(ctx, cli); len(rs) != 1 {
		t.Errorf("requests after two refused decisions: %+v", rs)
	}
}
