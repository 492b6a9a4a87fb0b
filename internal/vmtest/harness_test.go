package vmtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIntegrationBootOneGuest boots one 6.12 guest with two disks and checks
// what the guest sees: the right kernel, its disks with their sizes and
// serials, the 9p share writable.
func TestIntegrationBootOneGuest(t *testing.T) {
	Run(t, Options{Guests: []GuestConfig{{
		Name: "a", Kernel: Kernel612,
		Disks: []Disk{{Size: 8 << 20, Serial: "alpha"}, {Size: 16 << 20}},
	}}}, func(t *testing.T, g *Env) {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			t.Fatal(err)
		}
		rel := unix.ByteSliceToString(u.Release[:])
		if !strings.HasPrefix(rel, "6.12.") {
			t.Errorf("guest kernel %q, want 6.12.*", rel)
		}
		if len(g.Disks) != 2 || g.Disks[0] != "/dev/vda" || g.Disks[1] != "/dev/vdb" {
			t.Fatalf("disks %v", g.Disks)
		}
		for i, want := range []struct {
			sectors string
			serial  string
		}{{"16384", "alpha"}, {"32768", "a-disk1"}} {
			dev := []string{"vda", "vdb"}[i]
			b, _ := os.ReadFile("/sys/block/" + dev + "/size")
			if got := strings.TrimSpace(string(b)); got != want.sectors {
				t.Errorf("%s size %s sectors, want %s", dev, got, want.sectors)
			}
			b, _ = os.ReadFile("/sys/block/" + dev + "/serial")
			if got := strings.TrimSpace(string(b)); got != want.serial {
				t.Errorf("%s serial %q, want %q", dev, got, want.serial)
			}
		}
		if err := os.WriteFile(g.Shared+"/probe", []byte("x"), 0o644); err != nil {
			t.Errorf("9p share not writable: %v", err)
		}
	})
}

func busybox(args ...string) (string, error) {
	out, err := exec.Command("/bin/busybox", args...).CombinedOutput()
	return string(out), err
}

// TestIntegrationRemoveDisk pulls a disk out of a running guest (qemu
// device_del, as a failed drive or a pulled cable would look): the guest's
// kernel drops it and I/O to it fails, while the other disk keeps working.
// Plugged back in (AddDisk: qemu device_add), the same disk comes back with
// its serial and the data written before, and can be pulled again.
func TestIntegrationRemoveDisk(t *testing.T) {
	Run(t, Options{Guests: []GuestConfig{{
		Name: "a", Disks: []Disk{{Size: 8 << 20}, {Size: 8 << 20}},
	}}}, func(t *testing.T, g *Env) {
		f, err := os.OpenFile(g.Disks[1], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(make([]byte, 4096), 0); err != nil {
			t.Fatalf("write before removal: %v", err)
		}
		g.RemoveDisk(t, 1)
		buf := make([]byte, 4096)
		if _, err := f.WriteAt(buf, 8192); err == nil {
			if err = f.Sync(); err == nil {
				t.Errorf("write+fsync to the removed %s succeeded", g.Disks[1])
			}
		}
		if _, err := os.Stat(g.Disks[1]); err == nil {
			t.Errorf("%s still exists after removal", g.Disks[1])
		}
		other, err := os.OpenFile(g.Disks[0], os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("the other disk: %v", err)
		}
		defer other.Close()
		if _, err := other.WriteAt(buf, 0); err != nil {
			t.Errorf("the other disk failed: %v", err)
		}
		if err := other.Sync(); err != nil {
			t.Errorf("fsync the other disk: %v", err)
		}

		block := []byte("written before the unplug")
		directIO(t, g.Disks[0], 4096, block)
		g.RemoveDisk(t, 0)
		dev := g.AddDisk(t, 0)
		if g.Disks[0] != dev {
			t.Errorf("Disks[0] = %s, AddDisk returned %s", g.Disks[0], dev)
		}
		b, _ := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/serial")
		if got := strings.TrimSpace(string(b)); got != "a-disk0" {
			t.Errorf("re-plugged %s has serial %q, want a-disk0", dev, got)
		}
		if got := directIO(t, dev, 4096, nil); !bytes.HasPrefix(got, block) {
			t.Errorf("re-plugged %s reads %q, want %q", dev, got[:len(block)], block)
		}
		g.RemoveDisk(t, 0) // the re-plugged device is pulled like the first
		t.Logf("disk 0 came back as %s", dev)
	})
}
