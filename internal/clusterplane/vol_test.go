package clusterplane

import (
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// TestRemoteInfo: a non-owner shows the chunk size, journal and epoch the
// owner published (a record made with the engine's default chunk size
// says 0), the member roles from the status, and without a status an
// unknown state that names the owner.
func TestRemoteInfo(t *testing.T) {
	vol := model.Volume{Name: "v", UUID: "9680c80b-b0de-430c-ab6a-ac35eb6be4c1", K: 4, M: 2, Groups: 1, Owner: "b", State: model.VolumeReady,
		Members: []model.VolumeMember{{Slot: 0, Node: "a", Drive: "d0", Domain: "a"}, {Slot: 1, Node: "b", Drive: "d1", Domain: "b"}}}
	st := model.VolumeStatus{State: "degraded", Epoch: 41, ChunkSize: 64 << 10, Journal: true, OwnerJournal: 2,
		Members: []model.VolumeMemberStatus{{Slot: 0, Role: "failed", Failure: "missing"}, {Slot: 1, Role: "active"}}}
	in := remoteInfo(vol, st, true, "/dev/nvme0n1", 1<<30)
	if in.ChunkSize != 64<<10 || in.Epoch != 41 || !in.Journal || in.OwnerJournal != 2 || in.State != "degraded" || in.Failed != 1 {
		t.Fatalf("with the owner's status: %+v", in)
	}
	if in.Members[0].Device != "a:d0" || in.Members[0].Failure != "missing" || in.Owner != "b" || in.Size != 1<<30 {
		t.Fatalf("members and device: %+v", in)
	}
	vol.ChunkSize = 128 << 10
	if in := remoteInfo(vol, st, true, "", 0); in.ChunkSize != 128<<10 {
		t.Fatalf("record's chunk size %d, shown %d", vol.ChunkSize, in.ChunkSize)
	}
	in = remoteInfo(vol, model.VolumeStatus{}, false, "", 0)
	if in.State != "unknown" || in.Error == "" || in.Epoch != 0 || in.Journal {
		t.Fatalf("without a status: %+v", in)
	}
}
