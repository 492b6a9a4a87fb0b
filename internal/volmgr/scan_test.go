package volmgr

import (
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
