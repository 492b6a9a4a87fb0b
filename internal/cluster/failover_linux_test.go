//go:build linux

package cluster_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationFailover: the owner dies under I/O and another node takes
// the volume over (issue 13). Three 6.12 guests as in
// TestIntegrationClusterVolume (two member disks and a state disk each);
// "volume create v --data 4 --parity 2" on a places two members on every
// node, owner a.
//
//   - c's verifier writes 64 KiB blocks round-robin over a 2 MiB window
//     of its consumer device (O_DIRECT, each write followed by fsync: a
//     flush) and records, per block, the data of the last write whose
//     flush completed. After 3 s c kills a's qemu.
//   - The owner key lapses, b (plan.ChooseOwner: fewest owned volumes,
//     then name) CASes the record, acquires a larger epoch, imports c's
//     members, assembles degraded without a's two, exports the volume on
//     its own address; c's multipath head gets b's path and the write
//     held since the kill completes. No write or flush fails. The
//     failover time is kill -> first write completed after the pause
//     (printed as VMBENCH {"name":"failover",...}).
//   - c stops writing and reads every block back: each holds the data of
//     the last write whose flush completed.
//   - a boots again from its state disk: it rejoins as a non-owner (it
//     runs no engine, no ublk device), b re-adds a's members with a
//     partial resync, a scrub on b is clean and c reads everything back.
func TestIntegrationFailover(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: clusterVolumeGuests(t, nil), Timeout: 900 * time.Second}, failoverGuest)
}

const (
	foBlock  = 64 << 10
	foBlocks = 32 // 2 MiB window at offset 0
	// foPace between writes leaves the TCG guests CPU for etcd: the
	// failover under test, not the owner lease lapsing under load.
	foPace = 20 * time.Millisecond
)

func failoverGuest(t *testing.T, g *vmtest.Env) {
	start := time.Now()
	mountState(t, g)
	if g.BootNum > 1 {
		returnedOwner(t, g, start)
		return
	}
	formCluster(t, g, start)
	switch g.Name {
	case "a":
		g.Wait(t, "c", "joined")
		step(t, start, "creating 4+2 volume v over the three nodes")
		var in api.Volume
		if err := json.Unmarshal([]byte(createVolume(t, "v", "--data", "4", "--parity", "2")), &in); err != nil {
			t.Fatal(err)
		}
		if in.Owner != "a" || in.State != "optimal" {
			t.Fatalf("volume v: owner %q state %q, want a, optimal", in.Owner, in.State)
		}
		step(t, start, "created %s, owner a", in.UUID)
		g.Signal(t, "created")
		g.Wait(t, "c", "done") // killed meanwhile
	case "b":
		g.Wait(t, "a", "created")
		g.Wait(t, "c", "a-killed")
		in := waitOwner(t, start, "b", "degraded", 3*time.Minute)
		step(t, start, "b runs v: %s, members %+v", in.State, in.Members)
		g.Signal(t, "owner")
		g.Wait(t, "a", "back")
		resyncedAndScrubbed(t, start, "a")
		g.Signal(t, "healed")
		g.Wait(t, "c", "done")
	case "c":
		g.Wait(t, "a", "created")
		failoverVerifier(t, g, start)
	}
}

// failoverVerifier (on c) writes under the kill of a, measures the pause
// and checks what was flushed.
func failoverVerifier(t *testing.T, g *vmtest.Env, start time.Time) {
	head := waitHead(t, start)
	f, err := os.OpenFile(head, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := startPacedWriter(f, foPace)
	time.Sleep(3 * time.Second)
	if in := showVolume(t); in.Owner != "a" {
		t.Fatalf("volume v is owned by %q before the kill, want a (a takeover without a failure: owner leases lost on the loaded host?)", in.Owner)
	}
	step(t, start, "killing the owner a under the writer (%d flushed writes so far)", w.count())
	killed := time.Now()
	g.Kill(t, "a")
	g.Signal(t, "a-killed")
	// Wait until b runs the volume and 20 more writes completed after it.
	g.Wait(t, "b", "owner")
	w.waitMore(t, 20, 2*time.Minute, "I/O through "+head+" on the new owner")
	acked, err := w.stop()
	if err != nil {
		t.Fatalf("I/O error through %s: %v", head, err)
	}
	// The pause: the largest gap between two completions after the kill
	// (including kill -> first completion); failover time = kill -> the
	// completion that ended it.
	gap, resumed, total := w.longestGap(killed)
	secs := resumed.Sub(killed).Seconds()
	step(t, start, "failover: I/O paused for %.1f s, first write completed %.1f s after the kill; %d writes, none failed", gap.Seconds(), secs, total)
	fmt.Printf("VMBENCH {\"name\":\"failover\",\"seconds\":%.2f,\"pause_seconds\":%.2f,\"writes\":%d,\"kernel\":\"6.12\",\"tcg\":true}\n", secs, gap.Seconds(), total)
	checkAcked(t, f, acked, "after the failover")
	step(t, start, "every flushed write reads back (%d blocks)", len(acked))
	g.Signal(t, "verified")
	step(t, start, "booting a again with the same disks")
	g.Boot(t, "a")
	g.Wait(t, "b", "healed")
	checkAcked(t, f, acked, "after a's return and the resync")
	step(t, start, "every block still reads back after a's return")
	g.Signal(t, "done")
}

// checkAcked reads every block of acked back and compares its checksum.
func checkAcked(t *testing.T, f *os.File, acked map[int]string, when string) {
	t.Helper()
	buf := alignedBuf(t, foBlock)
	for blk, want := range acked {
		if _, err := f.ReadAt(buf, int64(blk)*foBlock); err != nil {
			t.Fatalf("read block %d %s: %v", blk, when, err)
		}
		s := sha256.Sum256(buf)
		if got := hex.EncodeToString(s[:]); got != want {
			t.Errorf("block %d %s: sha256 %s, the last flushed write was %s", blk, when, got[:16], want[:16])
		}
	}
}

// waitOwner polls the volume on this node until its owner is node and its
// state want.
func waitOwner(t *testing.T, start time.Time, node, want string, timeout time.Duration) api.Volume {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		b, err := osexec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
		var in api.Volume
		if err == nil && json.Unmarshal(b, &in) == nil {
			now := fmt.Sprintf("owner %s %s %s", in.Owner, in.State, in.Error)
			if now != last {
				step(t, start, "volume v: %s", now)
				last = now
			}
			if in.Owner == node && in.State == want {
				return in
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume v not owned by %s and %s after %s: %s (%v)", node, want, timeout, last, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// returnedOwner is a's boot after its power cut: it starts from its state
// disk, rejoins as a non-owner and never runs the volume's engine.
func returnedOwner(t *testing.T, g *vmtest.Env, start time.Time) {
	step(t, start, "boot %d: starting fabraidd from the state disk", g.BootNum)
	startDaemonClaiming(t, g, nil)
	noEngine := func(when string) {
		t.Helper()
		if m, _ := filepath.Glob("/dev/ublkb*"); len(m) != 0 {
			t.Fatalf("a runs a ublk device %s: %v (it is no owner)", when, m)
		}
	}
	in := showVolume(t)
	if in.Owner != "b" {
		t.Fatalf("volume v on the returned a: owner %q, want b", in.Owner)
	}
	noEngine("after its return")
	g.Signal(t, "back")
	g.Wait(t, "b", "healed")
	noEngine("after the resync")
	step(t, start, "a rejoined as a non-owner: no engine, owner b")
	g.Wait(t, "c", "done")
}
