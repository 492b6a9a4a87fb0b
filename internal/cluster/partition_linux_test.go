//go:build linux

package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/unixjson"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/internal/volmgr"
	"golang.org/x/sys/unix"
)

// TestIntegrationOwnerPartition: the owner loses etcd but not the drives
// (issue 13, docs/cluster.md "Partition"). Three 6.12 guests as in
// TestIntegrationFailover; v is 4+2 over the three nodes, owner a.
//
//   - c's verifier writes and flushes 64 KiB blocks (as in
//     TestIntegrationMove) and cuts etcd's ports (2379, 2380) between a
//     and b and between a and c: NVMe/TCP still flows everywhere, so a
//     still reaches every drive and every consumer still reaches a.
//   - a self-fences: its engine freezes before b takes the volume over
//     (a signals "fenced" when its engine reports frozen; b checks that
//     signal when it first runs the volume).
//   - b takes v over (degraded: a's drive exporter, cut from etcd, still
//     exports a's drives to a only), c's writes resume through b with no
//     I/O error. Then no write of a reaches any member: a's own member
//     disks' written sectors do not move from its freeze on, and a has
//     no live controller to b's or c's drives (the storage fence).
//   - c heals the network: a rejoins as a non-owner (its frozen engine is
//     stopped, no ublk device), b resyncs a's members partially, a scrub
//     is clean, and c reads back every write whose flush completed.
func TestIntegrationOwnerPartition(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: clusterVolumeGuests(t, nil), Timeout: 900 * time.Second}, func(t *testing.T, g *vmtest.Env) {
		partitionGuest(t, g, etcdCut)
	})
}

// TestIntegrationOwnerIsolated is TestIntegrationOwnerPartition with the
// owner a cut off from both other nodes entirely (etcd and NVMe/TCP): c's
// controller to a stays (reconnecting) while c connects b's export of
// the same NQN, so c's writes resume on b only if the two nodes' exports
// hand out controller ids from disjoint, stable blocks. c's kernel log
// must have no "Duplicate cntlid" and its writes must resume during the
// partition, with no I/O error.
func TestIntegrationOwnerIsolated(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: clusterVolumeGuests(t, nil), Timeout: 900 * time.Second}, func(t *testing.T, g *vmtest.Env) {
		partitionGuest(t, g, fullCut)
	})
}

// partitionCut is what the partition cuts between the owner a and the
// others.
type partitionCut int

const (
	etcdCut partitionCut = iota // etcd's ports only (NVMe/TCP flows)
	fullCut                     // everything (Env.Isolate)
)

// etcdPorts are the ports the partition cuts (internal/config defaults).
var etcdPorts = []int{2379, 2380}

func partitionGuest(t *testing.T, g *vmtest.Env, cut partitionCut) {
	start := time.Now()
	mountState(t, g)
	formCluster(t, g, start)
	switch g.Name {
	case "a":
		createOwnedByA(t, g, start)
		partitionedOwner(t, g, start)
	case "b":
		g.Wait(t, "a", "created")
		g.Wait(t, "c", "partitioned")
		in := waitOwner(t, start, "b", "degraded", 3*time.Minute)
		if !signalled(t, g, "a", "fenced") {
			t.Errorf("b runs v before a's engine froze (no self-fence before the takeover)")
		}
		step(t, start, "b runs v: %s, members %+v", in.State, in.Members)
		g.Signal(t, "owner")
		g.Wait(t, "a", "back")
		resyncedAndScrubbed(t, start, "a")
		g.Signal(t, "healed")
		g.Wait(t, "c", "done")
	case "c":
		g.Wait(t, "a", "created")
		partitionVerifier(t, g, start, cut)
	}
}

// partitionedOwner (on a) waits for its self-fence, then checks that no
// write of its own reaches a member while b runs the volume, and after the
// heal that it is a non-owner without an engine.
func partitionedOwner(t *testing.T, g *vmtest.Env, start time.Time) {
	g.Wait(t, "c", "partitioned")
	cut := time.Now()
	waitFrozen(t, 3*time.Minute)
	frozen := sectorsWritten(t, g.Disks[:2])
	step(t, start, "a's engine froze %.1f s after the cut (member sectors written: %v)", time.Since(cut).Seconds(), frozen)
	g.Signal(t, "fenced")
	g.Wait(t, "c", "resumed") // b runs v and c's writes go through it
	if now := sectorsWritten(t, g.Disks[:2]); now[0] != frozen[0] || now[1] != frozen[1] {
		t.Errorf("a's member disks written while b owns v: sectors %v at the freeze, %v now", frozen, now)
	}
	if live := liveDrivePaths(t, g.Addr("b"), g.Addr("c")); len(live) > 0 {
		t.Errorf("a still has live controllers to b's or c's drives while b owns v: %v", live)
	}
	step(t, start, "no write of a reached a member while b owns v")
	g.Signal(t, "checked")
	g.Wait(t, "c", "healed-net")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m, _ := filepath.Glob("/dev/ublkb*")
		if len(m) == 0 {
			break
		}
		if time.Now().After(deadline) {
			dumpStacks(t)
			t.Fatalf("a still runs ublk devices %v 2 min after the heal", m)
		}
		time.Sleep(time.Second)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out, err := fabraid(t, "volume", "show", "v", "--json")
		var in api.Volume
		if err == nil && json.Unmarshal([]byte(out), &in) == nil && in.Owner == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume v on a after the heal: %v %s, want owner b", err, out)
		}
		time.Sleep(2 * time.Second)
	}
	step(t, start, "a rejoined as a non-owner: no engine, owner b")
	g.Signal(t, "back")
	g.Wait(t, "c", "done")
}

// partitionVerifier (on c) writes while it cuts a off (etcd, or
// everything), checks that the writes resume on b without an error and,
// for a full cut, that the kernel refused no path for a duplicate
// controller id, heals, and reads back.
func partitionVerifier(t *testing.T, g *vmtest.Env, start time.Time, how partitionCut) {
	head := waitHead(t, start)
	f, err := os.OpenFile(head, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := startBlockWriter(f)
	time.Sleep(3 * time.Second)
	if in := showVolume(t); in.Owner != "a" {
		t.Fatalf("volume v is owned by %q before the partition, want a", in.Owner)
	}
	name, cut := "partition", time.Time{}
	if how == fullCut {
		name = "isolation"
		step(t, start, "isolating a from b and c (etcd and NVMe/TCP) under the writer (%d flushed writes so far)", w.count())
		cut = time.Now()
		g.Isolate(t, "a")
	} else {
		step(t, start, "cutting etcd between a and the others under the writer (%d flushed writes so far)", w.count())
		cut = time.Now()
		for _, o := range []string{"b", "c"} {
			g.PartitionPorts(t, "a", o, etcdPorts...)
		}
	}
	g.Signal(t, "partitioned")
	g.Wait(t, "b", "owner")
	w.waitMore(t, 20, 3*time.Minute, "writes through "+head+" after b took v over")
	gap, end, total := w.longestGap(cut)
	step(t, start, "%s: longest gap between completed writes %.1f s, ended by a write through b %.1f s after the cut; %d writes, none failed",
		name, gap.Seconds(), end.Sub(cut).Seconds(), total)
	if dup := kernelLogLines(t, "Duplicate cntlid"); len(dup) > 0 {
		t.Errorf("c's kernel refused a path for a duplicate controller id during the %s: %q", name, dup)
	}
	fmt.Printf("VMBENCH {\"name\":%q,\"pause_seconds\":%.2f,\"resumed_after_cut_seconds\":%.2f,\"writes\":%d,\"kernel\":\"6.12\",\"tcg\":true}\n",
		name, gap.Seconds(), end.Sub(cut).Seconds(), total)
	g.Signal(t, "resumed")
	g.Wait(t, "a", "checked")
	step(t, start, "healing the network")
	g.Heal(t)
	g.Signal(t, "healed-net")
	g.Wait(t, "b", "healed")
	acked, err := w.stop()
	if err != nil {
		t.Fatalf("I/O error through %s: %v", head, err)
	}
	checkAcked(t, f, acked, "after the partition and the heal")
	step(t, start, "every flushed write reads back (%d blocks)", len(acked))
	g.Signal(t, "done")
}

// kernelLogLines are the kernel log's messages (read from /dev/kmsg, the
// whole ring buffer) that contain s.
func kernelLogLines(t *testing.T, s string) []string {
	t.Helper()
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open /dev/kmsg: %v", err)
	}
	defer unix.Close(fd)
	var out []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EPIPE {
			continue // records overwritten while reading: go on with the next
		}
		if err != nil || n <= 0 {
			return out // EAGAIN: the end of the buffer
		}
		if rec := string(buf[:n]); strings.Contains(rec, s) {
			out = append(out, strings.TrimSpace(rec[strings.IndexByte(rec, ';')+1:]))
		}
	}
}

// signalled reports whether guest has signalled event (Env.Wait without
// the wait).
func signalled(t *testing.T, g *vmtest.Env, guest, event string) bool {
	t.Helper()
	// A listing, not a stat: see Env.Wait (9p negative dentries).
	entries, err := os.ReadDir(g.Shared)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == guest+".event."+event {
			return true
		}
	}
	return false
}

// waitFrozen waits until this node's engine of v reports frozen (asked on
// its own socket: the daemon's API needs etcd, which is cut).
func waitFrozen(t *testing.T, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		socks, _ := filepath.Glob("/run/fabraid/engine-*.sock")
		for _, s := range socks {
			var st volmgr.EngineStatus
			if err := unixjson.New(s, "engine", 5*time.Second).Do("GET", "/v1/status", nil, &st); err == nil && st.Frozen {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no frozen engine (sockets %v) %s after the cut", socks, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveDrivePaths lists this host's live NVMe controllers to drive exports
// (nqn...:drive:) at the given addresses.
func liveDrivePaths(t *testing.T, addrs ...string) []string {
	t.Helper()
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*")
	var live []string
	for _, c := range ctrls {
		read := func(f string) string { b, _ := os.ReadFile(filepath.Join(c, f)); return strings.TrimSpace(string(b)) }
		if !strings.Contains(read("subsysnqn"), ":drive:") || read("state") != "live" {
			continue
		}
		addr := read("address")
		for _, a := range addrs {
			if strings.Contains(addr, "traddr="+a+",") {
				live = append(live, filepath.Base(c)+" "+addr)
			}
		}
	}
	return live
}

// dumpStacks writes the kernel's blocked tasks (sysrq w) and the
// goroutines of fabraidd and its engines (SIGQUIT ends them) to the
// console: where a hang is.
func dumpStacks(t *testing.T) {
	t.Helper()
	os.WriteFile("/proc/sys/kernel/sysrq", []byte("1"), 0o644)
	os.WriteFile("/proc/sysrq-trigger", []byte("w"), 0o200)
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) == "fabraidd" {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			t.Logf("SIGQUIT to fabraidd pid %d: %v", pid, unix.Kill(pid, unix.SIGQUIT))
		}
	}
	time.Sleep(3 * time.Second)
}

// createOwnedByA (on a, once c joined) creates the 4+2 volume v over the
// three nodes, checks that a owns it and is optimal, and signals
// "created".
func createOwnedByA(t *testing.T, g *vmtest.Env, start time.Time) {
	t.Helper()
	g.Wait(t, "c", "joined")
	step(t, start, "creating 4+2 volume v over the three nodes")
	var in api.Volume
	if err := json.Unmarshal([]byte(createVolume(t, "v", "--data", "4", "--parity", "2")), &in); err != nil {
		t.Fatal(err)
	}
	if in.Owner != "a" || in.State != "optimal" {
		t.Fatalf("volume v: owner %q state %q, want a, optimal", in.Owner, in.State)
	}
	g.Signal(t, "created")
}
