package vmtest

import (
	"os"
	"os/exec"
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
