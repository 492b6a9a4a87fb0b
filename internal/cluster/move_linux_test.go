//go:build linux

package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationMove: `fabraid volume move` under I/O, there and back
// (issue 13, docs/cluster.md "Planned move"). Three 6.12 guests as in
// TestIntegrationClusterVolume; "volume create v --data 4 --parity 2" on
// a places two members on every node, owner a.
//
//   - c's verifier writes 64 KiB blocks round-robin over a 2 MiB window
//     of its consumer device (O_DIRECT, each write followed by fsync) and
//     records per block the data of the last write whose flush completed.
//   - c asks "volume move v b --wait": b imports the members while a
//     serves (the drives exported to a and b); then a turns its export
//     inaccessible, freezes its engine, hands its held requests off,
//     flushes, ends its own member imports and resigns; b acquires a
//     newer epoch, fences (the exporters drop a), assembles and exports;
//     c's head gets b's path; a removes its export once every node has a
//     live path to b. No write or flush fails; the longest gap between
//     completed writes is the pause (VMBENCH {"name":"move",...}). a runs
//     no ublk device after and has no live controller to b's or c's
//     drives, and c's drives allow one host each (the storage fence).
//   - c drains b ("node drain b --wait"): b, drained, moves v to the node
//     plan.ChooseOwner picks (a: every node holds members and owns
//     nothing else, a sorts first) the same way (VMBENCH "move-back"); b
//     runs no ublk device and no controller to a's or c's drives after;
//     "node undrain b". Every flushed write reads back.
func TestIntegrationMove(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: clusterVolumeGuests(t, nil), Timeout: 900 * time.Second}, moveGuest)
}

func moveGuest(t *testing.T, g *vmtest.Env) {
	start := time.Now()
	mountState(t, g)
	formCluster(t, g, start)
	noUblk := func(when string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, _ := filepath.Glob("/dev/ublkb*")
			if len(m) == 0 {
				step(t, start, "%s runs no ublk device %s", g.Name, when)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still runs ublk devices %v %s", g.Name, m, when)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	switch g.Name {
	case "a":
		g.Wait(t, "c", "joined")
		step(t, start, "creating 4+2 volume v over the three nodes")
		var in api.Volume
		if err := json.Unmarshal([]byte(mustFabraid(t, "volume", "create", "v", "--data", "4", "--parity", "2", "--json")), &in); err != nil {
			t.Fatal(err)
		}
		if in.Owner != "a" || in.State != "optimal" {
			t.Fatalf("volume v: owner %q state %q, want a, optimal", in.Owner, in.State)
		}
		step(t, start, "created %s, owner a", in.UUID)
		g.Signal(t, "created")
		g.Wait(t, "c", "moved")
		noUblk("after the move to b")
		noDriveControllers(t, g, start, "b", "c")
		g.Signal(t, "released")
		g.Wait(t, "c", "done")
	case "b":
		g.Wait(t, "a", "created")
		g.Wait(t, "c", "moved-back")
		noUblk("after the move back to a")
		noDriveControllers(t, g, start, "a", "c")
		g.Signal(t, "released")
		g.Wait(t, "c", "done")
	case "c":
		g.Wait(t, "a", "created")
		moveVerifier(t, g, start)
	}
}

// moveVerifier (on c) writes while it moves v to b and back to a.
func moveVerifier(t *testing.T, g *vmtest.Env, start time.Time) {
	head := waitHead(t, start)
	f, err := os.OpenFile(head, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := startBlockWriter(f)
	time.Sleep(3 * time.Second)
	move := func(to, name, signal string, cmd ...string) {
		t.Helper()
		if err := w.failed(); err != nil {
			t.Fatalf("I/O error before the move to %s: %v", to, err)
		}
		step(t, start, "moving v to %s under the writer (%d flushed writes so far)", to, w.count())
		t0 := time.Now()
		out := mustFabraid(t, cmd...)
		moved := time.Since(t0)
		step(t, start, "%s (%.1f s)", out, moved.Seconds())
		if in := showVolume(t); in.Owner != to {
			t.Fatalf("volume v after the move: owner %q, want %s", in.Owner, to)
		}
		n := w.count()
		deadline := time.Now().Add(2 * time.Minute)
		for w.count() < n+20 {
			if err := w.failed(); err != nil {
				t.Fatalf("I/O error through %s during the move to %s: %v", head, to, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("writes did not go on after the move to %s: %d completed, %d when it returned", to, w.count(), n)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := w.failed(); err != nil {
			t.Fatalf("I/O error through %s during the move to %s: %v", head, to, err)
		}
		gap, total := w.pause(t0)
		step(t, start, "move to %s: longest gap between completed writes %.2f s; command %.1f s; %d writes, none failed", to, gap.Seconds(), moved.Seconds(), total)
		fmt.Printf("VMBENCH {\"name\":%q,\"pause_seconds\":%.2f,\"command_seconds\":%.2f,\"writes\":%d,\"kernel\":\"6.12\",\"tcg\":true}\n",
			name, gap.Seconds(), moved.Seconds(), total)
		oneHostPerDrive(t, start, to)
		g.Signal(t, signal)
	}
	move("b", "move", "moved", "volume", "move", "v", "b", "--wait")
	g.Wait(t, "a", "released")
	move("a", "move-back", "moved-back", "node", "drain", "b", "--wait")
	g.Wait(t, "b", "released")
	if out := mustFabraid(t, "cluster", "status"); !strings.Contains(out, "alive,drained") {
		t.Errorf("cluster status after the drain of b shows no drained node:\n%s", out)
	}
	step(t, start, "%s", strings.TrimSpace(mustFabraid(t, "node", "undrain", "b")))
	acked, err := w.stop()
	if err != nil {
		t.Fatalf("I/O error through %s: %v", head, err)
	}
	checkAcked(t, f, acked, "after the moves")
	step(t, start, "every flushed write reads back (%d blocks)", len(acked))
	g.Signal(t, "done")
}

// noDriveControllers fails when this node (a planned move's old owner)
// still has a live controller to a drive export of the given nodes: it
// must have ended its member imports, or the exporters its controllers.
func noDriveControllers(t *testing.T, g *vmtest.Env, start time.Time, nodes ...string) {
	t.Helper()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, g.Addr(n))
	}
	if live := liveDrivePaths(t, addrs...); len(live) > 0 {
		t.Fatalf("%s, the old owner, still has live controllers to drives of %v: %v", g.Name, nodes, live)
	}
	step(t, start, "%s has no controller to the drives of %v", g.Name, nodes)
}

// oneHostPerDrive fails when one of this node's drive exports allows
// another host than one (the new owner's, to): the old owner must have
// been dropped by the storage fence.
func oneHostPerDrive(t *testing.T, start time.Time, to string) {
	t.Helper()
	subs, _ := filepath.Glob("/sys/kernel/config/nvmet/subsystems/nqn.2026-11.io.fabraid:drive:*")
	if len(subs) == 0 {
		t.Fatalf("no drive export here after the move to %s", to)
	}
	for _, s := range subs {
		hosts, _ := filepath.Glob(filepath.Join(s, "allowed_hosts", "*"))
		if len(hosts) != 1 {
			t.Fatalf("drive export %s allows %d hosts after the move to %s, want only %s's: %v", filepath.Base(s), len(hosts), to, to, hosts)
		}
	}
	step(t, start, "after the move to %s each of this node's %d drive exports allows one host", to, len(subs))
}
