package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/fabraid/fabraid/engine/superblock"
)

// A member whose device is removed is failed as missing at once and its
// device closed; the survivors record it so, and an assembly that finds it
// again takes it back as a resync target (only the regions written while
// it was away), after which it holds the right data.
func TestMemberRemovedReturns(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "removed", K: 2, M: 1, ChunkSize: 4096}, 4<<20)
	model := bytes.Repeat([]byte{0x11}, int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	// A clean stop: the bitmap is clear again.
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range mm {
		m.Reopen()
	}
	v, err := Assemble([]Member{mm[0], mm[1], mm[2]}, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.MemberRemoved(1); err != nil {
		t.Fatal(err)
	}
	if st := v.Status().Members[1]; st.Role != superblock.RoleFailed || st.Failure != superblock.FailMissing {
		t.Fatalf("slot 1 after removal: %+v, want failed (missing)", st)
	}
	if _, err := mm[1].ReadAt(make([]byte, 4096), 0); err == nil {
		t.Fatal("removed member still open")
	}
	if err := v.MemberRemoved(1); err != nil {
		t.Fatalf("second removal: %v", err)
	}
	copy(model[:64<<10], bytes.Repeat([]byte{0x22}, 64<<10))
	if _, err := v.WriteAt(model[:64<<10], 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range mm {
		m.Reopen()
	}
	v, err = Assemble([]Member{mm[0], mm[1], mm[2]}, []string{"m0", "m1", "m2"}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	st := v.Status()
	if m := st.Members[1]; m.Role != superblock.RoleRebuilding || !m.Resync {
		t.Fatalf("slot 1 back at assembly: %+v, want rebuilding (resync)", m)
	}
	if st.DirtyRegions < 1 || st.DirtyRegions >= v.bm.n {
		t.Fatalf("%d of %d regions dirty, want the one written while slot 1 was away", st.DirtyRegions, v.bm.n)
	}
	if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := v.FailMember(0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read without slot 0 after the return: %v (equal %v)", err, bytes.Equal(got, model))
	}
}

// Removing the member a group cannot lose fails the volume: the device is
// gone either way.
func TestMemberRemovedLosesGroup(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "lose", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	if err := v.MemberRemoved(0); err != nil {
		t.Fatal(err)
	}
	if err := v.MemberRemoved(1); err != ErrVolumeFailed {
		t.Fatalf("second removal in a 2+1 group: %v, want ErrVolumeFailed", err)
	}
}
