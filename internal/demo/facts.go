package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// facts are the values the cluster demo's guests observed, by name: what
// clusterScript's "fact NAME VALUE" left in the share as fact-NAME.
type facts map[string]string

// readFacts reads every fact-NAME file of the share dir.
func readFacts(dir string) (facts, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "fact-*"))
	if err != nil {
		return nil, fmt.Errorf("demo facts: %w", err)
	}
	f := facts{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("demo facts: %w", err)
		}
		f[strings.TrimPrefix(filepath.Base(p), "fact-")] = strings.TrimSpace(string(b))
	}
	return f, nil
}

// demoFacts are the facts summary needs: a run that passed has them all.
var demoFacts = []string{
	"owner_before", "killed", "owner_after", "takeover_epoch", "takeover_previous", "takeover_s",
	"write_pause_s", "write_total_s", "resync_partial", "resync_regions", "resync_bytes", "member_bytes",
	"scrub_stripes", "scrub_skipped", "scrub_mismatches", "returned_sees_owner",
}

// summary checks the facts of a cluster demo run against what the demo
// shows (the owner lost power, another node took the volume over, the old
// owner came back as a non-owner through a partial resync, the scrub found
// nothing) and says it with the observed values.
func summary(f facts) (string, error) {
	var missing []string
	for _, k := range demoFacts {
		if f[k] == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("no observed %s", strings.Join(missing, ", "))
	}
	owner, after := f["owner_before"], f["owner_after"]
	var errs []error
	if f["killed"] != owner {
		errs = append(errs, fmt.Errorf("the power cut hit %s, not vol0's owner %s", f["killed"], owner))
	}
	if after == owner {
		errs = append(errs, fmt.Errorf("the owner after the cut (%s) is the owner before it: no failover", after))
	}
	if f["takeover_previous"] != owner {
		errs = append(errs, fmt.Errorf("%s took vol0 over from %s, not from the owner that lost power (%s)", after, f["takeover_previous"], owner))
	}
	if f["returned_sees_owner"] == owner || f["returned_sees_owner"] == "none" {
		errs = append(errs, fmt.Errorf("after its return %s sees %s as vol0's owner, not another node", owner, f["returned_sees_owner"]))
	}
	if f["resync_partial"] != "true" {
		errs = append(errs, fmt.Errorf("%s's members came back through a full rebuild, not a partial resync", owner))
	}
	if f["scrub_mismatches"] != "0" {
		errs = append(errs, fmt.Errorf("the scrub found %s mismatching stripes", f["scrub_mismatches"]))
	}
	resync, err1 := mib(f["resync_bytes"])
	member, err2 := mib(f["member_bytes"])
	if err := errors.Join(append(errs, err1, err2)...); err != nil {
		return "", err
	}
	writer, reader := others(owner)
	return fmt.Sprintf("three nodes made one cluster; vol0's owner %s lost power while %s wrote through it; "+
		"%s took it over at owner epoch %s (%s s from its decision to the epoch); the write paused %s s (%s s for its 8 MiB) "+
		"and completed without an I/O error; %s came back as a non-owner (the owner is %s); "+
		"a partial resync of %s bitmap regions wrote %.1f MiB to its members (one member holds %.1f MiB of data); "+
		"a scrub of %s stripes found 0 mismatches; %s, %s and %s read every byte back",
		owner, writer, after, f["takeover_epoch"], f["takeover_s"], f["write_pause_s"], f["write_total_s"],
		owner, f["returned_sees_owner"], f["resync_regions"], resync, member, f["scrub_stripes"],
		writer, reader, owner), nil
}

// others are the writer and the reader of a demo run whose volume owner
// is owner: the other two nodes in name order (clusterScript's roles).
func others(owner string) (writer, reader string) {
	var o []string
	for _, n := range []string{"node1", "node2", "node3"} {
		if n != owner {
			o = append(o, n)
		}
	}
	if len(o) != 2 {
		return "?", "?"
	}
	return o[0], o[1]
}

// mib turns a fact in bytes into MiB.
func mib(bytes string) (float64, error) {
	n, err := strconv.ParseInt(bytes, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("demo facts: %q is not a byte count: %w", bytes, err)
	}
	return float64(n) / (1 << 20), nil
}
