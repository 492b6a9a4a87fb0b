package volmgr

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
)

// fileVolume creates a 2+1 volume on three files and returns their paths.
func fileVolume(t *testing.T) (*engine.Volume, []string) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	var devs []engine.Member
	for i := 0; i < 3; i++ {
		p := filepath.Join(dir, "d"+string(rune('0'+i)))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(4 << 20); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		devs = append(devs, engine.NewFileMember(f))
	}
	v, err := engine.Create(engine.Config{Name: "scan", K: 2, M: 1, ChunkSize: 4096, AssumeZeroed: true}, devs, paths, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return v, paths
}

func scanFiles(t *testing.T, paths []string) map[[16]byte]*onDisk {
	t.Helper()
	var found []scanned
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := superblock.ReadCopies(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, scanned{p, sb})
	}
	return groupVolumes(found)
}

// A drive whose member an admin failed is no member at the next scan (the
// engine would be started without it), but is kept for its re-add.
func TestScanLeavesFailedMemberOut(t *testing.T) {
	v, paths := fileVolume(t)
	if err := v.FailMember(1); err != nil {
		t.Fatal(err)
	}
	u := v.UUID()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	vols := scanFiles(t, paths)
	d := vols[u]
	if d == nil || len(vols) != 1 {
		t.Fatalf("scan found %d volumes, not %x", len(vols), u)
	}
	if want := []string{paths[0], paths[2]}; !slices.Equal(d.members, want) {
		t.Fatalf("members after an admin fail of slot 1: %v, want %v", d.members, want)
	}
	if d.failed[1] != paths[1] || len(d.failed) != 1 {
		t.Fatalf("failed members kept for re-add: %v, want slot 1 at %s", d.failed, paths[1])
	}
	// The engine started from what the scan found keeps slot 1 failed.
	var devs []engine.Member
	for _, p := range d.members {
		m, err := engine.OpenFileMember(p)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, m)
	}
	v, err := engine.Assemble(devs, d.members, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if ms := v.Status().Members[1]; ms.Role != superblock.RoleFailed || ms.Failure != superblock.FailAdmin {
		t.Fatalf("slot 1 after a restart from the scan: %+v", ms)
	}
}

// A drive whose member was only missing at the last assembly is a member
// again at the next scan (the engine started from it takes it back as a
// resync target), and is offered for a re-add while an engine runs.
func TestScanTakesMissingMemberBack(t *testing.T) {
	v, paths := fileVolume(t)
	u := v.UUID()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := engine.Open([]string{paths[0], paths[2]}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	d := scanFiles(t, paths)[u]
	if d == nil || !slices.Equal(d.members, paths) {
		t.Fatalf("members after slot 1 was missing: %+v, want %v", d, paths)
	}
	if d.failed[1] != paths[1] || !d.returning[1] || len(d.returning) != 1 {
		t.Fatalf("returning members: failed %v returning %v, want slot 1 at %s", d.failed, d.returning, paths[1])
	}
	v, err = engine.Open(d.members, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if ms := v.Status().Members[1]; ms.Role != superblock.RoleRebuilding || !ms.Resync {
		t.Fatalf("slot 1 after a restart from the scan: %+v, want a resync target", ms)
	}
}

// fakeEngine records re-adds and rebuilds.
type fakeEngine struct {
	Engine
	st       EngineStatus
	readds   []string
	busy     bool
	rebuilds int
}

func (f *fakeEngine) Rebuild(int64) error {
	f.rebuilds++
	return nil
}

func (f *fakeEngine) ReAdd(slot int, path string, _ int64) error {
	if f.busy {
		return fmt.Errorf("volume x: re-add: %w", ErrBusy)
	}
	f.readds = append(f.readds, fmt.Sprintf("%d:%s", slot, path))
	return nil
}

// A running engine gets back, through re-add, a member it reports failed as
// missing once the scan finds its drive again; members failed by request
// or on an I/O error are left alone, and a busy engine is retried later.
func TestReconcileReAddsReturningMember(t *testing.T) {
	members := make([]superblock.Member, 4)
	for i := range members {
		members[i] = superblock.Member{UUID: [16]byte{byte(i + 1)}, Role: superblock.RoleActive}
	}
	members[1].Role, members[1].Failure = superblock.RoleFailed, superblock.FailAdmin
	members[2].Role, members[2].Failure = superblock.RoleFailed, superblock.FailIO
	members[3].Role, members[3].Failure = superblock.RoleFailed, superblock.FailMissing
	var found []scanned
	for i := range members {
		sb := &superblock.Superblock{VolumeUUID: [16]byte{9}, Events: 5, Slot: i, MemberUUID: members[i].UUID,
			Members: append([]superblock.Member(nil), members...)}
		if i > 0 {
			sb.Events = 3 // failed members have older copies
			sb.Members[i].Role, sb.Members[i].Failure = superblock.RoleActive, superblock.FailUnrecorded
		}
		found = append(found, scanned{fmt.Sprintf("/dev/d%d", i), sb})
	}
	v := groupVolumes(found)[[16]byte{9}]
	if want := []string{"/dev/d0", "/dev/d3"}; !slices.Equal(v.members, want) {
		t.Fatalf("members %v, want %v", v.members, want)
	}
	e := &fakeEngine{}
	for i, m := range members {
		dev := fmt.Sprintf("/dev/d%d", i)
		if m.Failure == superblock.FailMissing {
			dev = "(missing)"
		}
		e.st.Engine.Members = append(e.st.Engine.Members, engine.MemberStatus{Slot: i, Device: dev, Role: m.Role, Failure: m.Failure})
	}
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	e.busy = true
	if err := m.reAddReturning(e, e.st, v); err != nil || len(e.readds) != 0 {
		t.Fatalf("busy engine: %v, re-adds %v", err, e.readds)
	}
	e.busy = false
	if err := m.reAddReturning(e, e.st, v); err != nil {
		t.Fatal(err)
	}
	if want := []string{"3:/dev/d3"}; !slices.Equal(e.readds, want) {
		t.Fatalf("re-adds %v, want %v", e.readds, want)
	}
	// An engine that was started with the member back (rebuilding) gets
	// its resync started; one that runs a task already is left alone.
	if err := m.resyncReturning(e, e.st, v); err != nil || e.rebuilds != 0 {
		t.Fatalf("resync with slot 3 still failed: %v, %d rebuilds", err, e.rebuilds)
	}
	e.st.Engine.Members[3].Role, e.st.Engine.Members[3].Failure = superblock.RoleRebuilding, superblock.FailUnrecorded
	e.st.Task = "scrub"
	if err := m.resyncReturning(e, e.st, v); err != nil || e.rebuilds != 0 {
		t.Fatalf("resync while a scrub runs: %v, %d rebuilds", err, e.rebuilds)
	}
	e.st.Task = ""
	if err := m.resyncReturning(e, e.st, v); err != nil || e.rebuilds != 1 {
		t.Fatalf("resync of slot 3 back at assembly: %v, %d rebuilds, want 1", err, e.rebuilds)
	}
}

// A member the running engine failed as unreachable (its path was lost:
// a remote drive's node powered off) is re-added once the scan finds its
// drive again, under whatever device name it has now (a remote namespace
// renumbers on reconnect); the scan keeps it as a member. The same member
// failed on an I/O error stays out.
func TestReconcileReAddsUnreachableMember(t *testing.T) {
	for _, reason := range []superblock.FailReason{superblock.FailUnreachable, superblock.FailIO} {
		readds, members := reAddRenumbered(t, 3, map[int]superblock.FailReason{1: reason})
		want, members3 := []string{"1:/dev/nvme5n1"}, 3
		if reason == superblock.FailIO {
			want, members3 = nil, 2
		}
		if !slices.Equal(readds, want) || len(members) != members3 {
			t.Fatalf("slot 1 failed (%s): re-adds %v, want %v; scan members %v", reason, readds, want, members)
		}
	}
}

// Two members of one node that come back together are both re-added in
// the same reconcile (the engine's re-add of the second stops the first
// one's rebuild and one rebuild covers both), not one per finished rebuild.
func TestReconcileReAddsReturningMembersTogether(t *testing.T) {
	readds, _ := reAddRenumbered(t, 4, map[int]superblock.FailReason{1: superblock.FailUnreachable, 2: superblock.FailUnreachable})
	if want := []string{"1:/dev/nvme5n1", "2:/dev/nvme6n1"}; !slices.Equal(readds, want) {
		t.Fatalf("re-adds %v, want %v in one reconcile", readds, want)
	}
}

// reAddRenumbered runs one reconcile's re-adds for a volume of n members
// whose failed ones (slot: reason) the scan finds again, all under new
// device names, and returns the re-adds and the scan's members.
func reAddRenumbered(t *testing.T, n int, failed map[int]superblock.FailReason) ([]string, []string) {
	t.Helper()
	members := make([]superblock.Member, n)
	for i := range members {
		members[i] = superblock.Member{UUID: [16]byte{byte(i + 1)}, Role: superblock.RoleActive}
		if r, ok := failed[i]; ok {
			members[i].Role, members[i].Failure = superblock.RoleFailed, r
		}
	}
	var found []scanned
	for i := range members {
		sb := &superblock.Superblock{VolumeUUID: [16]byte{9}, Events: 5, Slot: i, MemberUUID: members[i].UUID,
			Members: append([]superblock.Member(nil), members...)}
		if _, ok := failed[i]; ok {
			sb.Events = 3 // its own copy is older and says it is active
			sb.Members[i].Role, sb.Members[i].Failure = superblock.RoleActive, superblock.FailUnrecorded
		}
		found = append(found, scanned{fmt.Sprintf("/dev/nvme%dn1", i+4), sb}) // renumbered
	}
	v := groupVolumes(found)[[16]byte{9}]
	e := &fakeEngine{}
	for i, m := range members {
		e.st.Engine.Members = append(e.st.Engine.Members, engine.MemberStatus{Slot: i,
			Device: fmt.Sprintf("/dev/nvme%dn1", i), Role: m.Role, Failure: m.Failure})
	}
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	if err := m.reAddReturning(e, e.st, v); err != nil {
		t.Fatal(err)
	}
	return e.readds, v.members
}
