//go:build linux

package cluster_test

import (
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
)

// clusterGuests are the three 6.12 guests a, b, c of the cluster volume
// tests (TestIntegrationClusterVolume, TestIntegrationFailover): fabraid
// and fabraidd, the NVMe-oF, ublk and ext4 modules, two member disks and
// a small state disk each.
func clusterGuests(t *testing.T) []vmtest.GuestConfig {
	files := map[string]string{
		"/usr/bin/fabraid":  vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid"),
		"/usr/bin/fabraidd": vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd"),
	}
	mods := []string{"nvmet", "nvmet_tcp", "nvme_tcp", "ublk_drv", "crc32c_generic", "ext4"}
	var guests []vmtest.GuestConfig
	for _, n := range []string{"a", "b", "c"} {
		guests = append(guests, vmtest.GuestConfig{Name: n, Kernel: vmtest.Kernel612, Modules: mods, MemoryMB: 768,
			Disks: []vmtest.Disk{{Size: memberBytes}, {Size: memberBytes}, {Size: 32 << 20}}, Files: files})
	}
	return guests
}

// resyncedAndScrubbed (on the owner) waits until volume v is optimal after
// node's return, checks that its members were resynced partially (at most
// 1/8 of a member) and that a scrub finds no mismatch.
func resyncedAndScrubbed(t *testing.T, start time.Time, node string) {
	t.Helper()
	in := waitState(t, start, "optimal", 5*time.Minute)
	if r := in.Rebuild; r == nil || !r.Partial || r.Bytes <= 0 || r.Bytes > r.MemberBytes/8 {
		t.Errorf("rebuild after %s's return: %+v, want a partial resync of at most 1/8 of a member", node, r)
	} else {
		step(t, start, "%s's members resynced partially: %d regions, %d bytes of %d per member (%.2f%%)",
			node, r.Regions, r.Bytes, r.MemberBytes, 100*float64(r.Bytes)/float64(r.MemberBytes))
	}
	step(t, start, "%s's members are back; scrubbing", node)
	mustFabraid(t, "volume", "scrub", "v", "--wait")
	in = showVolume(t)
	if lt := in.LastTask; lt == nil || lt.Kind != "scrub" || lt.Error != "" || lt.Scrub == nil || lt.Scrub.Mismatches != 0 {
		t.Fatalf("scrub after %s's return: %+v", node, in.LastTask)
	}
	step(t, start, "scrub clean: %d stripes, 0 mismatches", in.LastTask.Scrub.Stripes)
}
