package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/superblock"
)

// A member failed by an admin request or an I/O error stays failed across
// a restart with the same members, with the reason recorded; only ReAdd
// brings it back, rebuilding the regions written meanwhile (everything
// after an I/O error), and then it holds the right data. (A member that was
// only missing comes back by itself: TestMissingMemberReturns.)
func TestFailedMemberStaysFailed(t *testing.T) {
	for _, reason := range []superblock.FailReason{superblock.FailAdmin, superblock.FailIO} {
		t.Run(reason.String(), func(t *testing.T) {
			v, mm := newTestVolume(t, Config{Name: "sticky", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
			model := bytes.Repeat([]byte{0x11}, int(v.Size()))
			if _, err := v.WriteAt(model, 0); err != nil {
				t.Fatal(err)
			}
			all := func() []Member {
				var d []Member
				for _, m := range mm {
					m.Reopen()
					d = append(d, m)
				}
				return d
			}
			switch reason {
			case superblock.FailAdmin:
				if err := v.FailMember(1); err != nil {
					t.Fatal(err)
				}
			case superblock.FailIO:
				mm[1].SetFailed(true)
				if _, err := v.WriteAt(model[:4096], 0); err != nil {
					t.Fatal(err)
				}
				mm[1].SetFailed(false)
			}
			// Written while slot 1 is away: its copy of these rows is stale.
			copy(model[:64<<10], bytes.Repeat([]byte{0x22}, 64<<10))
			if _, err := v.WriteAt(model[:64<<10], 0); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			v, err := Assemble(all(), []string{"m0", "m1", "m2"}, Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			st := v.Status().Members[1]
			if st.Role != superblock.RoleFailed || st.Failure != reason || st.Device != "(missing)" {
				t.Fatalf("slot 1 after a restart with the same members: %s (reason %s, device %s, resync %v), want failed (%s), not assembled",
					st.Role, st.Failure, st.Device, st.Resync, reason)
			}
			mm[1].Reopen() // assembly closed the device it left out
			if err := v.ReAdd(mm[1], "m1"); err != nil {
				t.Fatal(err)
			}
			if st := v.Status().Members[1]; st.Role != superblock.RoleRebuilding || st.Resync != (reason != superblock.FailIO) ||
				st.Failure != superblock.FailUnrecorded {
				t.Fatalf("slot 1 after re-add: %+v", st)
			}
			if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
				t.Fatal(err)
			}
			// Slot 1's data, read through a degraded volume without slot 0.
			if err := v.FailMember(0); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, v.Size())
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
				t.Fatalf("read without slot 0 after re-add: %v (equal %v)", err, bytes.Equal(got, model))
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An admin fail that would lose a group is refused before anything
// changes; ForceFailMember carries it out (and the volume fails).
func TestFailMemberRefusesGroupLoss(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "refuse", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	if err := v.FailMember(0); err != nil {
		t.Fatal(err)
	}
	before := v.Status()
	err := v.FailMember(1)
	if !errors.Is(err, ErrWouldLoseGroup) || !strings.Contains(err.Error(), "group 0 would keep 1 of 3 members in sync (slot 0 failed), it needs k=2") {
		t.Fatalf("fail of a second member of a 2+1 group: %v, want %v", err, ErrWouldLoseGroup)
	}
	after := v.Status()
	if after.Failed || after.Events != before.Events || after.Members[1].Role != superblock.RoleActive {
		t.Fatalf("refused fail changed the volume: failed %v, events %d -> %d, slot 1 %s",
			after.Failed, before.Events, after.Events, after.Members[1].Role)
	}
	if _, err := v.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatalf("read after a refused fail: %v", err)
	}
	if err := v.ForceFailMember(1); !errors.Is(err, ErrVolumeFailed) {
		t.Fatalf("forced fail: %v, want %v", err, ErrVolumeFailed)
	}
	if st := v.Status(); !st.Failed || st.Members[1].Role != superblock.RoleFailed || st.Members[1].Failure != superblock.FailAdmin {
		t.Fatalf("after forced fail: %+v", st)
	}
}

// A member failed while the volume runs is still held by it: DetachFailed
// lets go of the device (as mdadm --remove) so that it can be opened again
// and re-added; a slot that is not failed is refused.
func TestDetachFailedThenReAdd(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "detach", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	model := bytes.Repeat([]byte{0x33}, int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.DetachFailed(1); err == nil || !strings.Contains(err.Error(), "not failed") {
		t.Fatalf("detach of an active slot: %v", err)
	}
	if err := v.FailMember(1); err != nil {
		t.Fatal(err)
	}
	copy(model[:8192], bytes.Repeat([]byte{0x44}, 8192))
	if _, err := v.WriteAt(model[:8192], 0); err != nil {
		t.Fatal(err)
	}
	if err := v.DetachFailed(1); err != nil {
		t.Fatal(err)
	}
	if _, err := mm[1].ReadAt(make([]byte, 4096), 0); err == nil {
		t.Fatal("detached member still open")
	}
	mm[1].Reopen() // the drive opened again
	if err := v.ReAdd(mm[1], "m1"); err != nil {
		t.Fatal(err)
	}
	if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := v.FailMember(0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read without slot 0 after detach and re-add: %v (equal %v)", err, bytes.Equal(got, model))
	}
}

// dataWrites counts the bytes written to a member's data area (at or
// after off).
type dataWrites struct {
	*MemMember
	off   int64
	bytes atomic.Int64
}

func (d *dataWrites) WriteAt(p []byte, off int64) (int, error) {
	if off >= d.off {
		d.bytes.Add(int64(len(p)))
	}
	return d.MemMember.WriteAt(p, off)
}

func (d *dataWrites) WriteAtFUA(p []byte, off int64) (int, error) {
	if off >= d.off {
		d.bytes.Add(int64(len(p)))
	}
	return d.MemMember.WriteAtFUA(p, off)
}

// A member that was only missing at an assembly (a drive absent, a node
// rebooting) comes back by itself at the next assembly that finds it, as a
// resync target: only the regions written while it was away are rewritten
// on it, and afterwards it holds the right data (read back without another
// member).
func TestMissingMemberReturns(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "return", K: 2, M: 1, ChunkSize: 4096}, 4<<20)
	model := bytes.Repeat([]byte{0x11}, int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range mm {
		m.Reopen()
	}
	v, err := Assemble([]Member{mm[0], mm[2]}, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st := v.Status().Members[1]; st.Role != superblock.RoleFailed || st.Failure != superblock.FailMissing {
		t.Fatalf("slot 1 absent at assembly: %+v, want failed (missing)", st)
	}
	// Written while slot 1 is away: one region of many.
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
	back := &dataWrites{MemMember: mm[1], off: 256 << 10}
	v, err = Assemble([]Member{mm[0], back, mm[2]}, []string{"m0", "m1", "m2"}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	st := v.Status()
	if m := st.Members[1]; m.Role != superblock.RoleRebuilding || !m.Resync || m.Failure != superblock.FailUnrecorded || m.Device != "m1" {
		t.Fatalf("slot 1 back at assembly: %+v, want rebuilding (resync) from m1", m)
	}
	regions := v.bm.n
	if st.DirtyRegions < 1 || st.DirtyRegions >= regions {
		t.Fatalf("%d of %d regions dirty, want the one written while slot 1 was away", st.DirtyRegions, regions)
	}
	back.bytes.Store(0)
	if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	region := v.base.RegionRows * int64(v.geo.ChunkSize)
	if got, want := back.bytes.Load(), st.DirtyRegions*region; got == 0 || got > want {
		t.Fatalf("resync wrote %d bytes to the returning member, want at most the %d dirty regions (%d bytes) of %d",
			got, st.DirtyRegions, want, regions)
	}
	if m := v.Status().Members[1]; m.Role != superblock.RoleActive {
		t.Fatalf("slot 1 after the resync: %+v", m)
	}
	if err := v.FailMember(0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read without slot 0 after the return: %v (equal %v)", err, bytes.Equal(got, model))
	}
}

// A member that goes missing while it is rebuilt in full (a replacement)
// holds valid rows only below its checkpoint, which the bitmap does not
// describe: it is recorded as needing a full rebuild (io-error), stays out
// when it is back, and a ReAdd rebuilds it in full.
func TestMissingFullRebuildTargetStaysOut(t *testing.T) {
	v, mm := newTestVolume(t, Config{Name: "full", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	model := bytes.Repeat([]byte{0x55}, int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.FailMember(1); err != nil {
		t.Fatal(err)
	}
	repl := NewMemMember(1 << 20)
	if err := v.Replace(1, repl, "new"); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil { // before the rebuild ran
		t.Fatal(err)
	}
	for _, m := range mm {
		m.Reopen()
	}
	repl.Reopen()
	v, err := Assemble([]Member{mm[0], mm[2]}, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st := v.Status().Members[1]; st.Role != superblock.RoleFailed || st.Failure != superblock.FailIO {
		t.Fatalf("replacement absent at assembly: %+v, want failed (io-error)", st)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range mm {
		m.Reopen()
	}
	repl.Reopen()
	v, err = Assemble([]Member{mm[0], repl, mm[2]}, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if st := v.Status().Members[1]; st.Role != superblock.RoleFailed {
		t.Fatalf("replacement back at assembly: %+v, want left out", st)
	}
	repl.Reopen()
	if err := v.ReAdd(repl, "new"); err != nil {
		t.Fatal(err)
	}
	if st := v.Status().Members[1]; st.Role != superblock.RoleRebuilding || st.Resync {
		t.Fatalf("replacement re-added: %+v, want a full rebuild", st)
	}
	if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := v.FailMember(0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read without slot 0: %v (equal %v)", err, bytes.Equal(got, model))
	}
}
