package drive

import (
	"path/filepath"
	"testing"
)

// TestClaimedDrivesProbeNothing: listing the claimed drives opens no
// device node (the daemon lists them several times per reconcile pass),
// and lists the same drives, in path order, that Inventory says are
// claimed.
func TestClaimedDrivesProbeNothing(t *testing.T) {
	h := fakeHost(t)
	for _, dev := range []string{"vdd", "vda"} {
		if _, err := h.ClaimSpare(dev, dev == "vdd", dev == "vda"); err != nil {
			t.Fatalf("claim %s: %v", dev, err)
		}
	}
	var probes []string
	h.opened = func(path string) { probes = append(probes, filepath.Base(path)) }
	cd, err := h.ClaimedDrives()
	if err != nil {
		t.Fatal(err)
	}
	if len(probes) != 0 {
		t.Errorf("ClaimedDrives opened %v, want no device node opened", probes)
	}
	inv, err := h.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if len(probes) == 0 {
		t.Fatal("Inventory opened no device node: the probe counter counts nothing")
	}
	var want []Drive
	for _, d := range inv {
		if d.State == "claimed" {
			d.Reasons = nil
			want = append(want, d)
		}
	}
	if len(cd) != 2 || len(want) != 2 {
		t.Fatalf("claimed %+v, inventory's claimed %+v, want vda and vdd", cd, want)
	}
	for i := range cd {
		if cd[i].Path != want[i].Path || cd[i].ID != want[i].ID || cd[i].Spare != want[i].Spare || cd[i].Size != want[i].Size || cd[i].DevNum != want[i].DevNum {
			t.Errorf("claimed[%d] %+v, inventory has %+v", i, cd[i], want[i])
		}
	}
	if !cd[0].Spare || cd[1].Spare {
		t.Errorf("spares: vda %v vdd %v, want vda only", cd[0].Spare, cd[1].Spare)
	}
}

// BenchmarkClaimedDrives lists the claimed drives of a six-drive host,
// two claimed.
func BenchmarkClaimedDrives(b *testing.B) {
	h := fakeHost(b)
	for _, dev := range []string{"vda", "vdd"} {
		if _, err := h.ClaimSpare(dev, true, false); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := h.ClaimedDrives(); err != nil {
			b.Fatal(err)
		}
	}
}
