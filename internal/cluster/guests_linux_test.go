//go:build linux

package cluster_test

import (
	"testing"
	"time"
)

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
