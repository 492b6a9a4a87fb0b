package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
)

// The guests' scripts parse (sh -n): a syntax error would show only when
// make demo has booted its guests, minutes in.
func TestScriptsParse(t *testing.T) {
	sh := guestShell(t)
	for name, text := range map[string]string{"cluster": clusterScript, "node": guestScript + nodeScript} {
		cmd := exec.Command(sh[0], append(sh[1:], "-n")...)
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s script: %v\n%s", name, err, out)
		}
	}
}

// guestShell is busybox sh (the guests' shell) when the host has it, else sh.
func guestShell(t *testing.T) []string {
	t.Helper()
	if bb, err := exec.LookPath("busybox"); err == nil {
		return []string{bb, "sh"}
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this host")
	}
	return []string{sh}
}

// runHelpers runs body after clusterHelpers, with stdin, in a share of
// its own, and returns its output and exit error.
func runHelpers(t *testing.T, stdin, body string) (string, error) {
	t.Helper()
	sh := guestShell(t)
	cmd := exec.Command(sh[0], append(sh[1:], "-c", "sh="+t.TempDir()+"; me=node9\n"+clusterHelpers+body)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// The script's roles (writer and reader from the observed owner) are the
// ones the Go summary names, and an owner that is no node fails the demo.
func TestClusterRoles(t *testing.T) {
	for _, owner := range []string{"node1", "node2", "node3"} {
		out, err := runHelpers(t, "", "roles "+owner)
		if err != nil {
			t.Fatalf("roles %s: %v\n%s", owner, err, out)
		}
		w, r := others(owner)
		if out != w+" "+r {
			t.Errorf("roles %s = %q, others = %s %s", owner, out, w, r)
		}
		if w == owner || r == owner || w == r {
			t.Errorf("owner %s: writer %s, reader %s", owner, w, r)
		}
	}
	if out, err := runHelpers(t, "", "roles ''"); err == nil || !strings.Contains(out, "DEMO FAILED") {
		t.Errorf("roles of an empty owner: %v, %q; want a failure", err, out)
	}
}

// The script's JSON helpers read what "fabraid volume show vol0 --json"
// prints (a api.Volume encoded by encoding/json): the owner, the resync's
// bytes and the scrub's report.
func TestClusterJSONHelpers(t *testing.T) {
	in := api.Volume{Name: "vol0", State: "optimal", Device: "/dev/nvme1n1", Owner: "node2",
		Members: []api.Member{{Slot: 0, Device: "node1:vda", Domain: "node1", Role: "active"}},
		IO:      &engine.IOStats{},
		Rebuild: &api.RebuildBytes{Partial: true, Regions: 3, CoverBytes: 6 << 20, Bytes: 5 << 20, MemberBytes: 30 << 20},
		LastTask: &api.TaskResult{Kind: "scrub", Scrub: &engine.ScrubReport{Stripes: 480, Skipped: 1, Mismatches: 0},
			Finished: time.Unix(1, 0), Seconds: 2.5}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		"jstr owner":                             "node2",
		"jstr state":                             "optimal",
		"jstr device":                            "/dev/nvme1n1",
		"jobj rebuild_bytes | jbool running":     "false",
		"jobj rebuild_bytes | jbool partial":     "true",
		"jobj rebuild_bytes | jnum regions":      "3",
		"jobj rebuild_bytes | jnum bytes":        "5242880",
		"jobj rebuild_bytes | jnum cover_bytes":  "6291456",
		"jobj rebuild_bytes | jnum member_bytes": "31457280",
		"jobj scrub | jnum Stripes":              "480",
		"jobj scrub | jnum Skipped":              "1",
		"jobj scrub | jnum Mismatches":           "0",
	} {
		out, err := runHelpers(t, string(b), body)
		if err != nil || out != want {
			t.Errorf("%s = %q (%v), want %q\njson: %s", body, out, err, want, b)
		}
	}
}

// The script finds the takeover's epoch, previous owner and duration in
// the new owner's log as fabraidd writes it (slog's text handler).
func TestClusterTakeoverLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Warn("volume has no owner; taking it over", "volume", "vol0", "uuid", "u", "record_owner", "node1")
	log.Warn("took the volume over", "volume", "vol0", "epoch", uint64(7), "previous_owner", "node1", "seconds", 0.4321)
	body := `line=$(grep 'msg="took the volume over"' | grep ' volume=vol0 ' | tail -1)
echo "$(logattr epoch "$line") $(logattr previous_owner "$line") $(logattr seconds "$line")"`
	out, err := runHelpers(t, buf.String(), body)
	if want := "7 node1 0.4321"; err != nil || out != want {
		t.Errorf("takeover from the log = %q (%v), want %q\nlog: %s", out, err, want, buf.String())
	}
}

// The script fails the demo when the owner after the power cut is the
// owner before it, and it cuts the power of the owner it read.
func TestClusterScriptAssertsFailover(t *testing.T) {
	for _, want := range []string{
		`owner=$(field owner)`,
		`fact owner_before "$owner"`,
		`hostreq kill $owner`,
		`if [ -z "$after" ] || [ "$after" = "$owner" ]; then fail "the owner after the cut`,
		`[ "$now" != "$me" ] || fail "$me owns vol0 again after its return"`,
	} {
		if !strings.Contains(clusterScript, want) {
			t.Errorf("the cluster script lacks %q", want)
		}
	}
	if strings.Contains(clusterScript, "kill node") {
		t.Error("the cluster script cuts the power of a fixed node")
	}
}

func goodFacts() facts {
	return facts{
		"owner_before": "node1", "killed": "node1", "owner_after": "node3", "takeover_epoch": "4",
		"takeover_previous": "node1", "takeover_s": "0.3", "write_pause_s": "21.4", "write_total_s": "24.0",
		"resync_partial": "true", "resync_regions": "2", "resync_bytes": "2097152", "member_bytes": "31457280",
		"scrub_stripes": "480", "scrub_skipped": "0", "scrub_mismatches": "0", "returned_sees_owner": "node3",
	}
}

func TestSummary(t *testing.T) {
	s, err := summary(goodFacts())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vol0's owner node1 lost power while node2 wrote", "node3 took it over at owner epoch 4",
		"paused 21.4 s", "node1 came back as a non-owner (the owner is node3)", "2 bitmap regions wrote 2.0 MiB",
		"30.0 MiB of data", "480 stripes found 0 mismatches"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	for _, c := range []struct {
		name string
		edit func(facts)
		want string
	}{
		{"no failover", func(f facts) { f["owner_after"] = "node1" }, "the owner after the cut (node1) is the owner before it"},
		{"wrong node killed", func(f facts) { f["killed"] = "node3" }, "the power cut hit node3, not vol0's owner node1"},
		{"takeover from another", func(f facts) { f["takeover_previous"] = "node2" }, "not from the owner that lost power"},
		{"owner again", func(f facts) { f["returned_sees_owner"] = "node1" }, "after its return node1 sees node1"},
		{"full rebuild", func(f facts) { f["resync_partial"] = "false" }, "full rebuild"},
		{"mismatches", func(f facts) { f["scrub_mismatches"] = "2" }, "2 mismatching stripes"},
		{"missing", func(f facts) { delete(f, "write_pause_s") }, "no observed write_pause_s"},
		{"bad bytes", func(f facts) { f["resync_bytes"] = "x" }, "not a byte count"},
	} {
		f := goodFacts()
		c.edit(f)
		if _, err := summary(f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// The facts the script publishes are the ones summary needs.
func TestClusterScriptPublishesFacts(t *testing.T) {
	for _, k := range demoFacts {
		if !strings.Contains(clusterScript, "fact "+k+" ") {
			t.Errorf("the cluster script never publishes the fact %s", k)
		}
	}
}

// A fact one guest publishes is what another reads, and a guest waiting
// for anything ends when another one failed.
func TestClusterFactsInShare(t *testing.T) {
	out, err := runHelpers(t, "", `fact owner_before node2; factof owner_before; secs 2143; mib 3145728`)
	if want := "node2\n21.4\n3.0"; err != nil || out != want {
		t.Errorf("fact, factof, secs, mib = %q (%v), want %q", out, err, want)
	}
	out, err = runHelpers(t, "", `fact failure "node1: it broke"; waitfor node2 written; echo not reached`)
	if err == nil || !strings.Contains(out, "DEMO FAILED elsewhere: node1: it broke") || strings.Contains(out, "not reached") {
		t.Errorf("waitfor after another guest's failure: %v, %q", err, out)
	}
	dir := t.TempDir()
	sh := guestShell(t)
	cmd := exec.Command(sh[0], append(sh[1:], "-c", "sh="+dir+"; me=node3\n"+clusterHelpers+`fact killed node1; fact scrub_mismatches 0`)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f, err := readFacts(dir)
	if err != nil || len(f) != 2 || f["killed"] != "node1" || f["scrub_mismatches"] != "0" {
		t.Errorf("readFacts = %v, %v", f, err)
	}
}
