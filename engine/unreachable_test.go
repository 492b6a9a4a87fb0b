package engine

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/fabraid/fabraid/engine/superblock"
)

var errPathLost = errors.New("path lost")

// pathMember is a member whose path can be cut: while cut every I/O fails
// with errPathLost, and Unreachable says so (the FailureClassifier of a
// member whose NVMe controller is not live). With media set, the same
// errors are reported as reachable (a media error).
type pathMember struct {
	*dataWrites
	cut, media atomic.Bool
}

func newPathMember(m *MemMember, dataOff int64) *pathMember {
	return &pathMember{dataWrites: &dataWrites{MemMember: m, off: dataOff}}
}

func (p *pathMember) ReadAt(b []byte, off int64) (int, error) {
	if p.cut.Load() {
		return 0, errPathLost
	}
	return p.dataWrites.ReadAt(b, off)
}

func (p *pathMember) WriteAt(b []byte, off int64) (int, error) {
	if p.cut.Load() {
		return 0, errPathLost
	}
	return p.dataWrites.WriteAt(b, off)
}

func (p *pathMember) WriteAtFUA(b []byte, off int64) (int, error) {
	if p.cut.Load() {
		return 0, errPathLost
	}
	return p.dataWrites.WriteAtFUA(b, off)
}

func (p *pathMember) Flush() error {
	if p.cut.Load() {
		return errPathLost
	}
	return p.dataWrites.Flush()
}

func (p *pathMember) Unreachable(err error) bool {
	return !p.media.Load() && p.cut.Load() && errors.Is(err, errPathLost)
}

// A member whose path is lost while the volume runs (its node powered off,
// its network cut) is recorded as unreachable and comes back like a
// missing one: by ReAdd, or by itself at an assembly that finds it, with a
// resync of only the regions written while it was away; the same error
// reported as a media error is an I/O error (stays out, full rebuild).
func TestUnreachableMemberReturns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		media    bool // the member reports the error as a media error
		assemble bool // return at an assembly instead of by ReAdd
	}{
		{"readd", false, false},
		{"assembly", false, true},
		{"media-error", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const dataOff = 256 << 10
			mm, _ := memMembers(3, 4<<20)
			pm := newPathMember(mm[1], dataOff)
			pm.media.Store(tc.media)
			v, err := Create(Config{Name: "path", K: 2, M: 1, ChunkSize: 4096, RegionSize: 256 << 10, DataOffset: dataOff},
				[]Member{mm[0], pm, mm[2]}, []string{"m0", "m1", "m2"}, Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			model := bytes.Repeat([]byte{0x11}, int(v.Size()))
			if _, err := v.WriteAt(model, 0); err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second flush clears the idle bits
				if err := v.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			pm.cut.Store(true)
			// Written while slot 1 is away: one region of many (the
			// first write finds the path gone).
			copy(model[:64<<10], bytes.Repeat([]byte{0x22}, 64<<10))
			if _, err := v.WriteAt(model[:64<<10], 0); err != nil {
				t.Fatal(err)
			}
			want := superblock.FailUnreachable
			if tc.media {
				want = superblock.FailIO
			}
			if st := v.Status().Members[1]; st.Role != superblock.RoleFailed || st.Failure != want {
				t.Fatalf("slot 1 after its path was lost: %s (%s), want failed (%s)", st.Role, st.Failure, want)
			}
			pm.cut.Store(false) // the node is back with the same drive
			if tc.assemble {
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
				for _, m := range mm {
					m.Reopen()
				}
				if v, err = Assemble([]Member{mm[0], pm, mm[2]}, []string{"m0", "m1", "m2"}, Options{Logger: quietLogger()}); err != nil {
					t.Fatal(err)
				}
			} else if err := v.ReAdd(pm, "m1"); err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			st := v.Status()
			if m := st.Members[1]; m.Role != superblock.RoleRebuilding || m.Resync == tc.media {
				t.Fatalf("slot 1 back: %s (resync %v), want rebuilding with resync %v", m.Role, m.Resync, !tc.media)
			}
			pm.bytes.Store(0)
			if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
				t.Fatal(err)
			}
			region := v.base.RegionRows * int64(v.geo.ChunkSize)
			got, full := pm.bytes.Load(), v.geo.Rows*int64(v.geo.ChunkSize)
			// Status reports what the resync had to cover and wrote.
			lr := v.Status().LastRebuild
			wantCover, wantRegions := st.DirtyRegions*region, st.DirtyRegions
			if tc.media {
				wantCover, wantRegions = full, 0
			}
			if lr == nil || lr.Partial == tc.media || lr.Regions != wantRegions || lr.CoverBytes != wantCover ||
				lr.Bytes != got || lr.MemberBytes != full || lr.Done != lr.Total {
				t.Fatalf("last rebuild in status: %+v; want partial %v, %d regions, cover %d, %d bytes written of %d, done",
					lr, !tc.media, wantRegions, wantCover, got, full)
			}
			if tc.media {
				if got < full {
					t.Fatalf("rebuild after a media error wrote %d bytes of %d to slot 1, want a full rebuild", got, full)
				}
			} else if got == 0 || got > st.DirtyRegions*region || st.DirtyRegions >= v.bm.n {
				t.Fatalf("resync wrote %d bytes of %d to the returning member, want at most the %d of %d dirty regions (%d bytes)",
					got, full, st.DirtyRegions, v.bm.n, st.DirtyRegions*region)
			}
			if err := v.FailMember(0); err != nil {
				t.Fatal(err)
			}
			back := make([]byte, v.Size())
			if _, err := v.ReadAt(back, 0); err != nil || !bytes.Equal(back, model) {
				t.Fatalf("read without slot 0 after the return: %v (equal %v)", err, bytes.Equal(back, model))
			}
		})
	}
}

// A full-rebuild target (a replacement) that loses its path holds valid
// rows only below its checkpoint, which the bitmap does not describe: it
// is recorded as an I/O error, not as unreachable, so it does not come
// back by itself with a bitmap resync.
func TestUnreachableFullRebuildTargetIsIOError(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "full", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	if err := v.FailMember(1); err != nil {
		t.Fatal(err)
	}
	pm := newPathMember(NewMemMember(1<<20), 256<<10)
	if err := v.Replace(1, pm, "new"); err != nil {
		t.Fatal(err)
	}
	pm.cut.Store(true)
	if _, err := v.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if st := v.Status().Members[1]; st.Role != superblock.RoleFailed || st.Failure != superblock.FailIO {
		t.Fatalf("replacement that lost its path: %s (%s), want failed (io-error)", st.Role, st.Failure)
	}
}
