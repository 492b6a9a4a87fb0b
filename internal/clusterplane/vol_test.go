package clusterplane

import (
	"errors"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// TestRemoteInfo: a non-owner shows the chunk size, journal and epoch the
// owner published (a record made with the engine's default chunk size
// says 0), the member roles from the status, and without a status an
// unknown state that names the owner.
func TestRemoteInfo(t *testing.T) {
	vol := model.Volume{Name: "v", UUID: "9680c80b-b0de-430c-ab6a-ac35eb6be4c1", K: 4, M: 2, Groups: 1, Owner: "b", State: model.VolumeReady,
		Members: []model.VolumeMember{{Slot: 0, Node: "a", Drive: "d0", Domain: "a"}, {Slot: 1, Node: "b", Drive: "d1", Domain: "b"}}}
	st := model.VolumeStatus{State: "degraded", Epoch: 41, ChunkSize: 64 << 10, Journal: true, JournalBytes: 9<<20 - 48<<10, OwnerJournal: 2,
		Members: []model.VolumeMemberStatus{{Slot: 0, Role: "failed", Failure: "missing"}, {Slot: 1, Role: "active"}}}
	in := remoteInfo(vol, st, true, "/dev/nvme0n1", 1<<30)
	if in.ChunkSize != 64<<10 || in.Epoch != 41 || !in.Journal || in.JournalBytes != st.JournalBytes || in.OwnerJournal != 2 || in.State != "degraded" || in.Failed != 1 {
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

// TestCreateJournal: a journal size the engine accepts on the placed
// members goes into the record and from the record into the owner's
// create (the volume manager's plan); one it refuses is ErrInvalid before
// anything reaches etcd.
func TestCreateJournal(t *testing.T) {
	rec := model.Volume{Name: "v", State: model.VolumeCreating, K: 2, M: 1, Groups: 1, Owner: "a", MemberSize: 64 << 20,
		Members: []model.VolumeMember{{Slot: 0, Node: "a", Domain: "a"}, {Slot: 1, Node: "b", Domain: "b"}, {Slot: 2, Node: "c", Domain: "c"}}}
	for _, n := range []int64{4096, 32 << 20} {
		if err := setJournal(&rec, n); !errors.Is(err, volmgr.ErrInvalid) || rec.JournalBytes != 0 {
			t.Errorf("journal %d on 64 MiB members: %v, record %d; want ErrInvalid, 0", n, err, rec.JournalBytes)
		}
	}
	if err := setJournal(&rec, 8<<20); err != nil || rec.JournalBytes != 8<<20 {
		t.Fatalf("journal 8 MiB: %v, record %d", err, rec.JournalBytes)
	}
	imp := plan.Import{Volumes: []plan.Owned{{Volume: rec, UUID: [16]byte{1}}}}
	p := managerPlan(&clusterView{View: plan.View{Self: "a"}}, imp, nil)
	if len(p.Volumes) != 1 || p.Volumes[0].Config.JournalBytes != 8<<20 {
		t.Fatalf("planned volumes %+v, want the record's journal of 8 MiB", p.Volumes)
	}
}
