package drive

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost builds a sysfs/dev tree whose "devices" are regular files.
func fakeHost(t testing.TB) Host {
	t.Helper()
	root := t.TempDir()
	h := Host{SysBlock: filepath.Join(root, "sys/block"), Dev: filepath.Join(root, "dev"),
		MountInfo: filepath.Join(root, "mountinfo"), Swaps: filepath.Join(root, "swaps"), StateDir: filepath.Join(root, "state")}
	w := func(p, s string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"vda", "vdb", "vdc", "vdd", "vde", "loop0"} {
		dir := filepath.Join(h.SysBlock, name)
		w(filepath.Join(dir, "size"), "8192\n")
		w(filepath.Join(dir, "dev"), "254:"+itoa(int64(i*16))+"\n")
		w(filepath.Join(dir, "serial"), "SER-"+name+"\n")
		os.MkdirAll(filepath.Join(dir, "holders"), 0o755)
		w(filepath.Join(h.Dev, name), strings.Repeat("\x00", 8192*512))
	}
	f, _ := os.OpenFile(filepath.Join(h.Dev, "vdb"), os.O_WRONLY, 0)
	f.WriteAt([]byte("XFSB"), 0)
	f.Close()
	w(filepath.Join(h.SysBlock, "vdc/vdc1/partition"), "1\n")
	w(filepath.Join(h.SysBlock, "vdd/holders/dm-0"), "")
	w(filepath.Join(h.SysBlock, "vde/vde1/partition"), "1\n")
	w(filepath.Join(h.SysBlock, "vde/vde1/dev"), "254:65\n")
	w(h.MountInfo, "22 1 254:65 / /data rw - ext4 /dev/vde1 rw\n")
	w(h.Swaps, "Filename Type Size Used Priority\n")
	return h
}

func TestInventoryAndClaim(t *testing.T) {
	h := fakeHost(t)
	ds, err := h.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Drive{}
	for _, d := range ds {
		got[d.Name] = d
	}
	if _, ok := got["loop0"]; ok || len(got) != 5 {
		t.Fatalf("inventory: %+v", ds)
	}
	if d := got["vda"]; d.State != "available" || d.Size != 8192*512 || d.ID != "SER-vda" {
		t.Errorf("vda: %+v", d)
	}
	for name, want := range map[string]string{"vdb": "xfs signature at byte 0", "vdc": "has partitions vdc1", "vdd": "held by dm-0", "vde": "mounted at /data"} {
		if d := got[name]; d.State != "in-use" || !strings.Contains(strings.Join(d.Reasons, ";"), want) {
			t.Errorf("%s: %+v, want reason %q", name, d, want)
		}
	}

	if _, err := h.Claim("vda", false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Claim("vdb", false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "xfs") {
		t.Fatalf("claim vdb: %v", err)
	}
	if _, err := h.Claim("vde", true); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "never") {
		t.Fatalf("claim mounted vde --force: %v", err)
	}
	c, err := h.Claim(filepath.Join(h.Dev, "vdb"), true)
	if err != nil || !c.Forced {
		t.Fatalf("claim vdb --force: %+v %v", c, err)
	}
	f, _ := os.Open(filepath.Join(h.Dev, "vdb"))
	if s := Detect(f, 8192*512); len(s) != 0 {
		t.Errorf("vdb still has %v after a forced claim", s)
	}
	f.Close()
	cd, err := h.ClaimedDrives()
	if err != nil || len(cd) != 2 || cd[0].Name != "vda" || cd[1].Name != "vdb" {
		t.Fatalf("claimed: %+v %v", cd, err)
	}
	if _, err := h.Claim("SER-vda", false); err != nil {
		t.Fatalf("claim again by id: %v", err)
	}
	// A volume member (fabraid superblock) is not released without force.
	f, _ = os.OpenFile(filepath.Join(h.Dev, "vda"), os.O_WRONLY, 0)
	f.WriteAt([]byte("FABRAIDv"), 4096)
	f.Close()
	if err := h.Release("SER-vda", false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "superblock") {
		t.Fatalf("release of a member: %v", err)
	}
	if err := h.Release("SER-vda", true); err != nil {
		t.Fatal(err)
	}
	if err := h.Release("SER-vda", true); err == nil {
		t.Fatal("release twice succeeded")
	}
	if _, err := h.Find("nope"); err == nil {
		t.Fatal("found nope")
	}
}

// TestSpare: a drive claimed as a spare says so in the inventory, and
// SetSpare turns it into an ordinary claimed drive and back; an
// unclaimed drive cannot be a spare.
func TestSpare(t *testing.T) {
	h := fakeHost(t)
	if c, err := h.ClaimSpare("vda", false, true); err != nil || !c.Spare {
		t.Fatalf("claim --spare vda: %+v %v", c, err)
	}
	spare := func() bool {
		cd, err := h.ClaimedDrives()
		if err != nil || len(cd) != 1 {
			t.Fatalf("claimed: %+v %v", cd, err)
		}
		return cd[0].Spare
	}
	if !spare() {
		t.Error("vda claimed as a spare is not one in the inventory")
	}
	if err := h.SetSpare("SER-vda", false); err != nil || spare() {
		t.Errorf("spare --off: %v, spare %v", err, spare())
	}
	if err := h.SetSpare("SER-vda", true); err != nil || !spare() {
		t.Errorf("spare: %v, spare %v", err, spare())
	}
	if err := h.SetSpare("SER-vdc", true); err == nil || !strings.Contains(err.Error(), "not claimed") {
		t.Errorf("spare of an unclaimed drive: %v", err)
	}
}
