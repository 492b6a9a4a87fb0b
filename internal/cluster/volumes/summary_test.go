package volumes

import (
	"reflect"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

func TestSummary(t *testing.T) {
	ready, creating, orphan, moved := vol(uuidN(1), "a"), vol(uuidN(2), "b"), vol(uuidN(3), "c"), vol(uuidN(4), "d")
	ready.State, orphan.State, moved.State = model.VolumeReady, model.VolumeReady, model.VolumeReady
	moved.Owner = "b"
	failed := model.VolumeMemberStatus{Slot: 1, Node: "b", Role: "failed", Failure: "unreachable"}
	st := map[string]model.VolumeStatus{
		uuidN(1): {UUID: uuidN(1), Owner: "a", State: "rebuilding", Task: "resync", Progress: 42, ResyncBytes: 1 << 20,
			Members: []model.VolumeMemberStatus{{Slot: 0, Node: "a", Role: "active"}, failed}},
		uuidN(4): {UUID: uuidN(4), Owner: "a", State: "optimal"}, // the old owner's, not counted
	}
	got := Summary([]model.Volume{ready, creating, orphan, moved}, st)
	want := []model.VolumeInfo{
		{UUID: uuidN(1), Name: "a", K: 2, M: 1, Groups: 1, Owner: "a", Record: "ready", State: "rebuilding",
			Degraded: []model.VolumeMemberStatus{failed}, Task: "resync", Progress: 42, ResyncBytes: 1 << 20},
		{UUID: uuidN(2), Name: "b", K: 2, M: 1, Groups: 1, Owner: "a", Record: "creating", State: "creating"},
		{UUID: uuidN(3), Name: "c", K: 2, M: 1, Groups: 1, Owner: "a", Record: "ready", State: "unknown"},
		{UUID: uuidN(4), Name: "d", K: 2, M: 1, Groups: 1, Owner: "b", Record: "ready", State: "unknown"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Summary:\n got %+v\nwant %+v", got, want)
	}
}
