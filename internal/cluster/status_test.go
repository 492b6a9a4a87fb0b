package cluster

import (
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// TestStatusVolumes: cluster status lists the volume records with their
// owners' state and degraded members.
func TestStatusVolumes(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1 := newNode(t, "n1", &c)
	n1.o.Members = 1
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	st, err := n1.Status(ctx)
	if err != nil || len(st.Volumes) != 0 {
		t.Fatalf("status without volumes: %+v, %v", st.Volumes, err)
	}
	u := "0f6c5a52-0000-4000-8000-000000000001"
	v := model.Volume{UUID: u, Name: "v1", K: 2, M: 1, Groups: 1, Owner: "n1", State: model.VolumeReady,
		Members: []model.VolumeMember{{Slot: 0, Node: "n1", Drive: "d1"}, {Slot: 1, Node: "n2", Drive: "d2"}, {Slot: 2, Node: "n3", Drive: "d3"}}}
	if err := volumes.Create(ctx, n1.cli, v); err != nil {
		t.Fatal(err)
	}
	lost := model.VolumeMemberStatus{Slot: 1, Node: "n2", Role: "failed", Failure: "unreachable"}
	if err := volumes.PutStatus(ctx, n1.cli, 0, model.VolumeStatus{UUID: u, Name: "v1", Owner: "n1", State: "degraded",
		Members: []model.VolumeMemberStatus{{Slot: 0, Node: "n1", Role: "active"}, lost, {Slot: 2, Node: "n3", Role: "active"}}}); err != nil {
		t.Fatal(err)
	}
	st, err = n1.Status(ctx)
	if err != nil || len(st.Volumes) != 1 {
		t.Fatalf("status: %+v, %v", st.Volumes, err)
	}
	if got := st.Volumes[0]; got.Name != "v1" || got.State != "degraded" || got.Owner != "n1" || len(got.Degraded) != 1 || got.Degraded[0] != lost {
		t.Errorf("volume in status: %+v", got)
	}
}
