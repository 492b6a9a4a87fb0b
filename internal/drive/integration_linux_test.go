//go:build linux

package drive_test

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationDriveClaim runs `fabraid drive list/claim` on a 6.12 guest
// with real virtio disks carrying real signatures (magic bytes written at
// their on-disk offsets: mkfs is not in the guest) and one disk held open
// with O_EXCL, as a mounted filesystem or md would hold it.
func TestIntegrationDriveClaim(t *testing.T) {
	disks := make([]vmtest.Disk, 6)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 16 << 20}
	}
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{
			Name: "a", Kernel: vmtest.Kernel612, Disks: disks,
			Files: map[string]string{"/usr/bin/fabraid": vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid")},
		}},
		Timeout: 90 * time.Second,
	}, func(t *testing.T, g *vmtest.Env) {
		os.MkdirAll("/etc/fabraid", 0o755)
		if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte("state_dir = /tmp/fabraid\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		write := func(dev string, off int64, b []byte) {
			f, err := os.OpenFile(dev, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		vda, vdb, vdc, vdd, vde, vdf := g.Disks[0], g.Disks[1], g.Disks[2], g.Disks[3], g.Disks[4], g.Disks[5]
		// ext4: s_magic at 1024+56, EXTENTS|FLEX_BG in s_feature_incompat.
		ext4 := make([]byte, 1024)
		binary.LittleEndian.PutUint16(ext4[56:], 0xEF53)
		binary.LittleEndian.PutUint32(ext4[96:], 0x240)
		write(vdb, 1024, ext4)
		write(vdc, 0, []byte("XFSB"))
		md := make([]byte, 4)
		binary.LittleEndian.PutUint32(md, 0xa92b4efc)
		write(vdd, 4096, md) // md 1.2
		// vde: held open exclusively, like a mounted filesystem holds it.
		held, err := os.OpenFile(vde, os.O_RDONLY|os.O_EXCL, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()

		run := func(args ...string) (string, error) {
			out, err := exec.Command("/usr/bin/fabraid", args...).CombinedOutput()
			t.Logf("fabraid %s: %v\n%s", strings.Join(args, " "), err, out)
			return string(out), err
		}
		out, err := run("drive", "list", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var ds []drive.Drive
		if err := json.Unmarshal([]byte(out), &ds); err != nil {
			t.Fatal(err)
		}
		byPath := map[string]drive.Drive{}
		for _, d := range ds {
			byPath[d.Path] = d
		}
		if d := byPath[vda]; d.State != "available" || d.Size != 16<<20 || d.Serial != "a-disk0" {
			t.Errorf("%s: %+v", vda, d)
		}
		for dev, want := range map[string]string{vdb: "ext4 signature at byte 1080", vdc: "xfs signature at byte 0", vdd: "md 1.2 signature at byte 4096", vde: "cannot open exclusively"} {
			if d := byPath[dev]; d.State != "in-use" || !strings.Contains(strings.Join(d.Reasons, ";"), want) {
				t.Errorf("%s: %+v, want reason %q", dev, d, want)
			}
			if _, err := run("drive", "claim", dev); err == nil {
				t.Errorf("claim %s succeeded, want refusal (%s)", dev, want)
			} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Errorf("claim %s: %v, want exit 1", dev, err)
			}
		}
		if _, err := run("drive", "claim", vda); err != nil {
			t.Fatalf("claim blank disk: %v", err)
		}
		// A probe's momentary exclusive hold (fabraidd's drive scan, another
		// claim) is waited out, not taken for a holder: vdf is held for
		// 250 ms as its claim starts.
		brief, err := os.OpenFile(vdf, os.O_RDONLY|os.O_EXCL, 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(250 * time.Millisecond); brief.Close() }()
		if _, err := drive.System("/tmp/fabraid").Claim(vdf, false); err != nil {
			t.Fatalf("claim %s while a probe held it for 250 ms: %v", vdf, err)
		}
		if _, err := run("drive", "claim", "--force", vdb); err != nil {
			t.Fatalf("claim --force %s: %v", vdb, err)
		}
		out, _ = run("drive", "list")
		for _, dev := range []string{vda, vdb, vdf} {
			if !strings.Contains(out, dev) || !regexpLine(out, dev, "claimed") {
				t.Errorf("%s not claimed in list", dev)
			}
		}
		// The forced claim wiped the ext4 signature.
		f, _ := os.Open(vdb)
		if s := drive.Detect(f, 16<<20); len(s) != 0 {
			t.Errorf("%s still has %v", vdb, s)
		}
		f.Close()
	})
}

func regexpLine(out, dev, word string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, dev+" ") && strings.Contains(l, word) {
			return true
		}
	}
	return false
}
