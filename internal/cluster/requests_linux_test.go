//go:build linux

package cluster_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationClusterRequests: engine operations and replace asked on
// nodes that do not own the volume, carried out by its owner (requests in
// etcd). Three 6.12 guests as in TestIntegrationClusterVolume (two member
// disks and a state disk each); c has a fourth disk, claimed after the
// volume is created: the only free drive.
//
//   - a creates v (4+2, owner a, 2 members per node).
//   - b: "volume scrub v --wait": a runs it, b prints its result (clean).
//   - b: "volume fail v S" (S: one of c's members) degrades v; "volume
//     re-add v S" brings it back (resync), v optimal.
//   - c writes a region through its multipath head, fails its other
//     member R, and asks "volume replace v R": the record moves R to c's
//     spare (the only free drive that keeps 2 chunks per domain), the
//     owner imports it, replaces and rebuilds; v optimal, R's member UUID
//     recorded, the old drive no longer exported by c; c reads its region
//     back intact and a scrub asked on c is clean.
//   - b fails one of b's members and asks for a replace: refused, no
//     drive fits (c's spare is taken); re-add brings it back.
func TestIntegrationClusterRequests(t *testing.T) {
	guests := clusterVolumeGuests(t, map[string]int{"c": 1})
	vmtest.Run(t, vmtest.Options{Guests: guests, Timeout: 1500 * time.Second}, requestsGuest)
}

// slotsOn are the slots of in whose member is in domain.
func slotsOn(in api.Volume, domain string) []int {
	var out []int
	for _, m := range in.Members {
		if m.Domain == domain {
			out = append(out, m.Slot)
		}
	}
	return out
}

func requestsGuest(t *testing.T, g *vmtest.Env) {
	start := time.Now()
	mountState(t, g)
	formCluster(t, g, start)
	switch g.Name {
	case "a":
		g.Wait(t, "c", "joined")
		step(t, start, "creating 4+2 volume v")
		mustFabraid(t, "volume", "create", "v", "--data", "4", "--parity", "2")
		in := waitState(t, start, "optimal", 3*time.Minute)
		if in.Owner != "a" || len(slotsOn(in, "c")) != 2 {
			t.Fatalf("volume v: owner %q, members %+v", in.Owner, in.Members)
		}
		g.Signal(t, "created")
		g.Wait(t, "b", "refused")
		waitState(t, start, "optimal", 5*time.Minute)
		mustFabraid(t, "cluster", "status")
		g.Signal(t, "done")
	case "b":
		g.Wait(t, "a", "created")
		step(t, start, "scrub asked on b")
		if out := mustFabraid(t, "volume", "scrub", "v", "--wait"); !strings.Contains(out, " 0 mismatches") {
			t.Fatalf("scrub on b: %s", out)
		}
		in := showVolume(t)
		s := slotsOn(in, "c")[0]
		step(t, start, "fail of slot %d (on c) asked on b", s)
		mustFabraid(t, "volume", "fail", "v", strconv.Itoa(s))
		in = waitState(t, start, "degraded", 2*time.Minute)
		if m := in.Members[s]; m.Role != "failed" || m.Failure != "admin" {
			t.Fatalf("slot %d after fail: %+v", s, m)
		}
		step(t, start, "re-add of slot %d asked on b", s)
		mustFabraid(t, "volume", "re-add", "v", strconv.Itoa(s))
		waitState(t, start, "optimal", 3*time.Minute)
		g.Signal(t, "readded")

		g.Wait(t, "c", "replaced")
		s = slotsOn(in, "b")[0]
		mustFabraid(t, "volume", "fail", "v", strconv.Itoa(s))
		waitState(t, start, "degraded", 2*time.Minute)
		out, err := fabraid(t, "volume", "replace", "v", strconv.Itoa(s))
		if err == nil || !strings.Contains(out, "no free drive in a domain that keeps 4+2 with at most 2 chunks per domain") {
			t.Fatalf("replace of b's slot %d with no drive that fits: %v %s", s, err, out)
		}
		mustFabraid(t, "volume", "re-add", "v", strconv.Itoa(s))
		waitState(t, start, "optimal", 3*time.Minute)
		g.Signal(t, "refused")
		g.Wait(t, "a", "done")
	case "c":
		g.Wait(t, "b", "readded")
		head := waitHead(t, start)
		sum := writeRegion(t, head, 0, regionBytes, 'r')
		mustFabraid(t, "drive", "claim", g.Disks[3])
		in := showVolume(t)
		r := slotsOn(in, "c")[1]
		old := strings.TrimPrefix(in.Members[r].Device, "c:")
		step(t, start, "fail and replace of slot %d (c:%s) asked on c", r, old)
		mustFabraid(t, "volume", "fail", "v", strconv.Itoa(r))
		waitState(t, start, "degraded", 2*time.Minute)
		out := mustFabraid(t, "volume", "replace", "v", strconv.Itoa(r))
		if !strings.Contains(out, "new member c:") || strings.Contains(out, "c:"+old+" ") {
			t.Fatalf("replace: %s", out)
		}
		in = waitState(t, start, "optimal", 6*time.Minute)
		if d := in.Members[r].Device; d == "c:"+old || !strings.HasPrefix(d, "c:") {
			t.Fatalf("slot %d after replace: %s (was c:%s)", r, d, old)
		}
		step(t, start, "slot %d rebuilt on %s", r, in.Members[r].Device)
		if got := readRegion(t, head, 0, regionBytes); got != sum {
			t.Fatalf("region after replace: sha256 %s, wrote %s", got, sum)
		}
		if out := mustFabraid(t, "volume", "scrub", "v", "--wait"); !strings.Contains(out, " 0 mismatches") {
			t.Fatalf("scrub after replace: %s", out)
		}
		// The old drive is exported no more (its claim is released).
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := os.Stat(filepath.Join("/sys/kernel/config/nvmet/subsystems", exporter.NQN(old)))
			if os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("old drive %s still exported after a minute (%v)", old, err)
			}
			time.Sleep(time.Second)
		}
		g.Signal(t, "replaced")
		g.Wait(t, "a", "done")
	}
}
