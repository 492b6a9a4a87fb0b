//go:build linux

package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// reprotectInterval is the VM test's down_out_interval (default 600 s).
const reprotectInterval = 20 * time.Second

// TestIntegrationReprotect: a node stays down past down_out_interval and
// the owner re-protects its volume on another node's free drives (issue
// 26). Four 6.12 guests: a, b, c as in TestIntegrationClusterVolume (etcd
// members), d a fourth node (client-only) with two free drives;
// down_out_interval 20 s.
//
//   - a creates v (4+2 --nodes a,b,c: two members on each, owner a); c
//     writes a region through its multipath head.
//   - c powers b off. a's status of v says, while b has been down for
//     less than the interval, when b's members will be replaced; then
//     the owner moves b's two slots to d's drives one after the other
//     (plan.Reprotect: d's domain holds none of the group, b's old
//     domain is not the owner's) and rebuilds them.
//   - v is optimal with two members on d and none on b, without b; c
//     reads its region back intact and a scrub is clean.
//   - c claimed a fourth disk as a spare before v was created: v got
//     none of it. c fails one of its members (volume fail): the owner
//     replaces it with c's spare at once (no down_out_interval) and
//     rebuilds it; v optimal, the region intact.
//
// Four guests for 8-9 min: not part of make test (its time budget), run by
// make reprotect (FABRAID_VMTEST_REPROTECT=1).
func TestIntegrationReprotect(t *testing.T) {
	if os.Getenv("FABRAID_VMTEST_REPROTECT") == "" && !vmtest.InGuest() {
		t.Skip("four guests for 8-9 min: run by make reprotect (FABRAID_VMTEST_REPROTECT=1)")
	}
	guests := clusterVolumeGuests(t, map[string]int{"c": 1})
	d := guests[2]
	d.Name = "d"
	guests = append(guests, d)
	f := filepath.Join(t.TempDir(), "down-out")
	if err := os.WriteFile(f, []byte(fmt.Sprint(int(reprotectInterval.Seconds()))), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range guests {
		files := map[string]string{downOutFile: f}
		for k, v := range guests[i].Files {
			files[k] = v
		}
		guests[i].Files = files
	}
	vmtest.Run(t, vmtest.Options{Guests: guests, Timeout: 1500 * time.Second}, reprotectGuest)
}

func reprotectGuest(t *testing.T, g *vmtest.Env) {
	start := time.Now()
	mountState(t, g)
	if g.Name == "d" {
		g.Wait(t, "c", "joined")
		g.Wait(t, "a", "token-d")
		startDaemonClaiming(t, g, g.Disks[:2])
		tok, _ := os.ReadFile(filepath.Join(g.Shared, "token-d"))
		mustFabraid(t, "cluster", "join", g.Addr("a"), "--token", string(tok))
		step(t, start, "d joined")
		g.Signal(t, "joined")
		g.Wait(t, "c", "done")
		return
	}
	formCluster(t, g, start)
	switch g.Name {
	case "a":
		tok := mustFabraid(t, "cluster", "token", "--ttl", "10m")
		if err := os.WriteFile(filepath.Join(g.Shared, "token-d"), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		g.Signal(t, "token-d")
		g.Wait(t, "d", "joined")
		g.Wait(t, "c", "spare")
		step(t, start, "creating 4+2 volume v on a, b, c")
		createVolume(t, "v", "--data", "4", "--parity", "2", "--nodes", "a,b,c")
		in := showVolume(t)
		if in.Owner != "a" || len(slotsOn(in, "a")) != 2 || len(slotsOn(in, "b")) != 2 || len(slotsOn(in, "c")) != 2 {
			t.Fatalf("volume v: owner %q members %+v, want owner a and two on each of a, b, c", in.Owner, in.Members)
		}
		g.Signal(t, "created")
		g.Wait(t, "c", "done")
	case "b":
		g.Wait(t, "a", "created")
		g.Wait(t, "c", "done") // powered off meanwhile
	case "c":
		mustFabraid(t, "drive", "claim", "--spare", g.Disks[3])
		spare := driveID(t, g.Disks[3])
		g.Signal(t, "spare")
		g.Wait(t, "a", "created")
		if in := showVolume(t); slicesContainAny(memberDevices(in), spare) {
			t.Fatalf("v was placed on c's spare %s: %+v", spare, in.Members)
		}
		head := waitHead(t, start)
		sum := writeRegion(t, head, 0, regionBytes, 'p')
		step(t, start, "c wrote %d bytes; powering b off", regionBytes)
		g.Kill(t, "b")
		killed := time.Now()
		in, seen := waitReprotected(t, start, 12*time.Minute)
		step(t, start, "v optimal again %.1f s after b's power-off, members %+v", time.Since(killed).Seconds(), in.Members)
		if !slicesContainAny(seen, "down_out_interval") {
			t.Errorf("volume show never said when b's members are replaced; it said %q", seen)
		}
		if got := readRegion(t, head, 0, regionBytes); got != sum {
			t.Fatalf("region after re-protection: sha256 %s, wrote %s", got, sum)
		}
		if out := mustFabraid(t, "volume", "scrub", "v", "--wait"); !strings.Contains(out, " 0 mismatches") {
			t.Fatalf("scrub after re-protection: %s", out)
		}
		s := slotsOn(in, "c")[0]
		step(t, start, "failing slot %d (%s); c's spare %s should replace it", s, in.Members[s].Device, spare)
		mustFabraid(t, "volume", "fail", "v", fmt.Sprint(s))
		failed := time.Now()
		in = waitOptimalWith(t, start, s, "c:"+spare, 6*time.Minute)
		step(t, start, "slot %d on the spare and optimal %.1f s after the fail", s, time.Since(failed).Seconds())
		if got := readRegion(t, head, 0, regionBytes); got != sum {
			t.Fatalf("region after the spare's rebuild: sha256 %s, wrote %s", got, sum)
		}
		mustFabraid(t, "cluster", "status")
		g.Signal(t, "done")
	}
}

// waitReprotected polls v until it is optimal with two members on d and
// none on b, and returns it with every reprotect text it showed.
func waitReprotected(t *testing.T, start time.Time, timeout time.Duration) (api.Volume, []string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []string
	last := ""
	for {
		out, err := osexec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
		var in api.Volume
		if err == nil && json.Unmarshal(out, &in) == nil {
			if in.Reprotect != "" && (len(seen) == 0 || seen[len(seen)-1] != in.Reprotect) {
				seen = append(seen, in.Reprotect)
				step(t, start, "reprotect: %s", in.Reprotect)
			}
			now := fmt.Sprintf("%s on d %v on b %v", in.State, slotsOn(in, "d"), slotsOn(in, "b"))
			if now != last {
				step(t, start, "volume v: %s", now)
				last = now
			}
			if in.State == "optimal" && len(slotsOn(in, "d")) == 2 && len(slotsOn(in, "b")) == 0 {
				return in, seen
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("v not re-protected after %s: %s (%v)", timeout, last, err)
		}
		time.Sleep(time.Second)
	}
}

// waitOptimalWith polls v until it is optimal with slot on device.
func waitOptimalWith(t *testing.T, start time.Time, slot int, device string, timeout time.Duration) api.Volume {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		out, err := osexec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
		var in api.Volume
		if err == nil && json.Unmarshal(out, &in) == nil && slot < len(in.Members) {
			now := fmt.Sprintf("%s, slot %d %s %s; reprotect %q", in.State, slot, in.Members[slot].Device, in.Members[slot].Role, in.Reprotect)
			if now != last {
				step(t, start, "volume v: %s", now)
				last = now
			}
			if in.State == "optimal" && in.Members[slot].Device == device {
				return in
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %d not optimal on %s after %s: %s (%v)", slot, device, timeout, last, err)
		}
		time.Sleep(time.Second)
	}
}

// driveID is the claim id of this node's drive at path.
func driveID(t *testing.T, path string) string {
	t.Helper()
	var ds []struct {
		Path, ID string
		Spare    bool
	}
	if err := json.Unmarshal([]byte(mustFabraid(t, "drive", "list", "--json")), &ds); err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Path == path {
			if !d.Spare {
				t.Fatalf("drive %s (%s) is not listed as a spare", path, d.ID)
			}
			return d.ID
		}
	}
	t.Fatalf("drive %s not listed", path)
	return ""
}

// memberDevices are the node:drive of in's members.
func memberDevices(in api.Volume) []string {
	var out []string
	for _, m := range in.Members {
		out = append(out, m.Device)
	}
	return out
}

func slicesContainAny(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
