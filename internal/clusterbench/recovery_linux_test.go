//go:build linux

package clusterbench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/benchtools"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// The recovery rows (on a, after the degraded rounds): b boots again and
// the members it lost come back (resync: md re-adds them through its
// write-intent bitmap, fabraid resyncs its bitmap's regions), then one
// member of b's on each side is failed and rebuilt onto b's spare drive
// (fabraid: volume replace --wait; md: fail, remove, add: a full
// recovery). md runs first in both: fabraidd on b starts only after md's
// resync, so the two never run at once. One run each.

// mdBitmapChunk is md's write-intent bitmap chunk (mdCreate):
// fabraid's region size for 64 MiB members (volmgr's regionSize: the
// largest power of two, at least 1 MiB, giving 64 regions), so both track
// the same granularity; md's default for an internal bitmap (64 MiB)
// would cover a whole member with one bit.
const mdBitmapChunk = "1M"

// mountState (on b) puts fabraidd's state directory and the NVMe host
// identity (/etc/nvme) on the state disk, made on the first boot, so that
// b comes back after its power cut as the same node (as internal/cluster's
// volume tests do: the guests' root is an initramfs).
func mountState(t *testing.T, g *vmtest.Env) {
	dev := g.Disks[diskState]
	if g.BootNum == 1 {
		if out, err := exec.Command("mke2fs", "-q", dev).CombinedOutput(); err != nil {
			t.Fatalf("mke2fs %s: %v %s", dev, err, out)
		}
	}
	os.MkdirAll("/var/lib/fabraid", 0o700)
	if out, err := exec.Command("mount", "-t", "ext4", dev, "/var/lib/fabraid").CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v %s", dev, err, out)
	}
	os.MkdirAll("/var/lib/fabraid/nvme", 0o755)
	os.RemoveAll("/etc/nvme")
	if err := os.Symlink("/var/lib/fabraid/nvme", "/etc/nvme"); err != nil {
		t.Fatal(err)
	}
}

// returnedB is b's second boot: it exports md's disks again at once, and
// starts fabraidd from its state disk once md has resynced; after
// fabraid's resync it claims its fabraid spare for the rebuild row.
func returnedB(t *testing.T, g *vmtest.Env, start time.Time) {
	exportDisks(t, g, readIdentity(t, g, "a"))
	logf(t, start, "boot %d: md's disks exported again", g.BootNum)
	g.Signal(t, "md-back")
	g.Wait(t, "a", "md-synced")
	startFabraidd(t, g, nil)
	logf(t, start, "fabraidd started from the state disk")
	g.Signal(t, "fab-back")
	g.Wait(t, "a", "resynced")
	spare := g.Disks[diskFabSpare]
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out, err := exec.Command("/usr/bin/fabraid", "drive", "claim", spare).CombinedOutput()
		if err == nil {
			break
		}
		if !etcdSlow(string(out)) || time.Now().After(deadline) {
			t.Fatalf("drive claim %s: %v %s", spare, err, out)
		}
		time.Sleep(2 * time.Second)
	}
	logf(t, start, "spare %s claimed", spare)
	g.Signal(t, "spare")
	g.Wait(t, "c", "done")
}

// mdBitmap (on a, before b goes down) logs md's internal write-intent
// bitmap, which the degraded rows' md and the resync row run with (md0 has
// it since mdCreate).
func mdBitmap(t *testing.T, start time.Time) {
	chunk := readTrim("/sys/block/md0/md/bitmap/chunksize")
	if chunk == "" || chunk == "0" {
		t.Fatalf("md0 has no write-intent bitmap (chunksize %q)", chunk)
	}
	logf(t, start, "md0: internal write-intent bitmap, chunk %s bytes", chunk)
}

// recoveryRun is one resync or rebuild: its time (from the start of the
// resync or recovery, as a saw it, to its end), the bytes written to its
// targets, the member data bytes its rate counts, and the guests' CPU.
type recoveryRun struct {
	secs    float64
	written int64
	bytes   int64 // the rate's bytes: resync = written, rebuild = member data bytes
	cpu     map[string]float64
	note    string
}

func (r recoveryRun) rate() float64 {
	if r.secs <= 0 {
		return 0
	}
	return float64(r.bytes) / (1 << 20) / r.secs
}

func (r recoveryRun) cpuPerGiB() float64 {
	return sample{cpu: r.cpu, gib: float64(r.bytes) / (1 << 30)}.cpuPerGiB()
}

// written is the bytes written to devs so far (their block layer
// counters on a).
func written(devs []string) int64 {
	var n int64
	for _, d := range devs {
		_, w := sectorsRW(d)
		n += int64(w) * 512
	}
	return n
}

// mdadm runs mdadm with args and returns its output.
func mdadm(args ...string) (string, error) {
	out, err := exec.Command(benchtools.Bin+"/mdadm", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// mdRecover (on a) runs kick and waits until md0 is whole and idle: the
// time from kick to then, the guests' CPU and the bytes written to
// targets meanwhile.
func mdRecover(t *testing.T, start time.Time, nodes map[string]string, targets []string, kick func()) recoveryRun {
	w0 := written(targets)
	c0 := cpuNow(t, nodes)
	t0 := time.Now()
	kick()
	for readTrim("/sys/block/md0/md/degraded") != "0" || readTrim("/sys/block/md0/md/sync_action") != "idle" {
		if time.Since(t0) > 10*time.Minute {
			t.Fatalf("md0 not whole 10 min after the recovery started: %s", readTrim("/proc/mdstat"))
		}
		time.Sleep(250 * time.Millisecond)
	}
	r := recoveryRun{secs: time.Since(t0).Seconds(), cpu: cpuSince(t, nodes, c0), written: written(targets) - w0}
	logf(t, start, "md0 whole after %.1f s, %d bytes written to %v: %s", r.secs, r.written, targets, readTrim("/proc/mdstat"))
	return r
}

// fabRecover (on a) runs run (if any) in the background and polls volume
// v until a rebuild task that finished after since is its last, no task
// runs and the volume is optimal. The time and the CPU count from the
// first poll that saw the rebuild running (from the call when none did,
// said in the note) to the one that saw it done.
func fabRecover(t *testing.T, start time.Time, nodes map[string]string, since time.Time, run func() error) (recoveryRun, api.Volume) {
	c0, t0 := cpuNow(t, nodes), time.Now()
	ran := make(chan error, 1)
	if run != nil {
		go func() { ran <- run() }()
	} else {
		ran <- nil
	}
	var runErr error
	finished := false
	seen, wasRunning, tasks := false, false, 0
	last := ""
	for {
		if !finished {
			select {
			case runErr = <-ran:
				finished = true
				if runErr != nil {
					t.Fatalf("replace: %v", runErr)
				}
			default:
			}
		}
		b, err := exec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
		var in api.Volume
		if err == nil && json.Unmarshal(b, &in) == nil {
			running := in.Task == "rebuild" || in.Progress != nil || (in.Rebuild != nil && in.Rebuild.Running)
			if running && !wasRunning {
				tasks++
			}
			wasRunning = running
			if running && !seen {
				seen = true
				c0, t0 = cpuNow(t, nodes), time.Now()
				logf(t, start, "volume v: rebuild running (%+v)", in.Rebuild)
			}
			if now := in.State + " " + in.Task; now != last {
				logf(t, start, "volume v: %s", now)
				last = now
			}
			lt := in.LastTask
			if finished && in.State == "optimal" && in.Task == "" && lt != nil && lt.Kind == "rebuild" && lt.Finished.After(since) {
				if lt.Error != "" {
					t.Fatalf("rebuild failed: %s", lt.Error)
				}
				r := recoveryRun{secs: time.Since(t0).Seconds(), cpu: cpuSince(t, nodes, c0)}
				r.note = fmt.Sprintf("%d rebuild task(s) seen, the last %.1f s", tasks, lt.Seconds)
				if !seen {
					r.note += "; never seen running: time and CPU from the start of the wait"
				}
				return r, in
			}
		}
		if time.Since(since) > 10*time.Minute {
			t.Fatalf("volume v: no finished rebuild 10 min after %v (%s)", since, last)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// bMembers are b's members of the fabraid volume as a sees them.
func bMembers(in api.Volume) []api.Member {
	var out []api.Member
	for _, m := range in.Members {
		if m.Domain == "b" {
			out = append(out, m)
		}
	}
	return out
}

// recovery (on a) boots b again and measures the resync and the rebuild
// rows.
func recovery(t *testing.T, g *vmtest.Env, start time.Time, id benchID) {
	nodes := map[string]string{"b": g.Addr("b"), "c": g.Addr("c")}
	if out, err := mdadm("-X", g.Disks[2]); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "dirty") || strings.Contains(l, "Chunksize") {
				logf(t, start, "md0 bitmap before b returns: %s", strings.TrimSpace(l))
			}
		}
	}
	logf(t, start, "booting b again")
	g.Boot(t, "b")
	g.Wait(t, "b", "md-back")

	// md: b's disks come back under new names (their controllers were
	// deleted after the member profile's 60 s); re-added through the
	// bitmap.
	devs := importDisks(t, g, id, "b", "d0", "d1")
	mdadm("/dev/md0", "--remove", "failed")
	mdadm("/dev/md0", "--remove", "detached")
	note := "re-add through the bitmap"
	mdRS := mdRecover(t, start, nodes, devs, func() {
		if out, err := mdadm(append([]string{"/dev/md0", "--re-add"}, devs...)...); err != nil {
			logf(t, start, "mdadm --re-add: %v %s; adding (full recovery)", err, out)
			note = "re-add refused: full recovery"
			if out, err := mdadm(append([]string{"/dev/md0", "--add"}, devs...)...); err != nil {
				t.Fatalf("mdadm --add %v: %v %s", devs, err, out)
			}
		}
	})
	mdRS.bytes, mdRS.note = mdRS.written, note

	// fabraid: b starts fabraidd, exports its drives again, a's importer
	// finds the members and the engine resyncs the bitmap's regions.
	since := time.Now()
	g.Signal(t, "md-synced")
	fabRS, in := fabRecover(t, start, nodes, since, nil)
	if r := in.Rebuild; r != nil {
		var bdevs []string
		for _, m := range bMembers(in) {
			bdevs = append(bdevs, m.Device)
		}
		fabRS.written = written(bdevs)
		fabRS.note += fmt.Sprintf("; engine: partial %v, %d regions, %d of %d bytes (%d per member); written to %v since their import: %d",
			r.Partial, r.Regions, r.Bytes, r.CoverBytes, r.MemberBytes, bdevs, fabRS.written)
		// The rate counts what was written to b's members, as md's: the
		// engine's figure is its last task's only (b's members may
		// come back one at a time, one resync each).
		fabRS.bytes = fabRS.written
		if fabRS.bytes <= 0 {
			fabRS.bytes = r.Bytes
			fabRS.note += "; no block counters: rate from the engine's bytes"
		}
		if !r.Partial {
			fabRS.note += "; a full rebuild, not a resync"
		}
	}
	reportRecovery(t, "resync_b_returns", fabRS, mdRS,
		"md: internal write-intent bitmap, "+mdBitmapChunk+" chunk; rate = bytes resynced / time")
	g.Signal(t, "resynced")
	g.Wait(t, "b", "spare")

	// Rebuild of one member of b's onto b's spare: md first.
	spare := importDisks(t, g, id, "b", "d2")[0]
	kib, _ := strconv.ParseInt(readTrim("/sys/block/md0/md/component_size"), 10, 64)
	mdRB := mdRecover(t, start, nodes, []string{spare}, func() {
		for _, args := range [][]string{{"--fail", devs[0]}, {"--remove", devs[0]}, {"--add", spare}} {
			if out, err := mdadm(append([]string{"/dev/md0"}, args...)...); err != nil {
				t.Fatalf("mdadm %v: %v %s", args, err, out)
			}
		}
	})
	mdRB.bytes, mdRB.note = kib<<10, fmt.Sprintf("fail, remove, add %s (b's spare): full recovery", spare)

	var v api.Volume
	if err := json.Unmarshal([]byte(fab(t, "volume", "show", "v", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	slot := strconv.Itoa(bMembers(v)[0].Slot)
	fab(t, "volume", "fail", "v", slot)
	logf(t, start, "fabraid: slot %s (b) failed; replacing it onto b's spare", slot)
	waitVolume(t, start, func(in api.Volume) bool { return in.State == "degraded" })
	fabRB, in := fabRecover(t, start, nodes, time.Now(), func() error {
		// The replace checks the slot's failure in the status the owner
		// publishes in etcd, which may lag behind the engine.
		for deadline := time.Now().Add(2 * time.Minute); ; {
			out, err := exec.Command("/usr/bin/fabraid", "volume", "replace", "v", slot, "--node", "b", "--wait").CombinedOutput()
			if err == nil {
				return nil
			}
			if !(strings.Contains(string(out), "fail it first") || etcdSlow(string(out))) || time.Now().After(deadline) {
				return fmt.Errorf("%v: %s", err, out)
			}
			time.Sleep(2 * time.Second)
		}
	})
	if r := in.Rebuild; r != nil {
		fabRB.bytes, fabRB.written = r.MemberBytes, r.Bytes
		fabRB.note += fmt.Sprintf("; engine: partial %v, %d of %d bytes", r.Partial, r.Bytes, r.CoverBytes)
	}
	for _, m := range in.Members {
		if strconv.Itoa(m.Slot) == slot {
			fabRB.note += fmt.Sprintf("; slot %s now %s on %s", slot, m.Device, m.Domain)
		}
	}
	reportRecovery(t, "rebuild_onto_spare", fabRB, mdRB,
		"fabraid: volume fail + volume replace --node b --wait; md: --fail, --remove, --add (recovery, speed limits raised); rate = member data bytes / time")
}

// reportRecovery prints a recovery row's VMBENCH line and table.
func reportRecovery(t *testing.T, name string, fab, md recoveryRun, how string) {
	byNode := func(r recoveryRun) map[string]float64 {
		out := map[string]float64{}
		for n, c := range r.cpu {
			if r.bytes > 0 {
				out[n] = round2(c / (float64(r.bytes) / (1 << 30)))
			}
		}
		return out
	}
	line := map[string]any{"bench": "cluster", "name": name, "unit": "MiB/s",
		"fabraid": round1(fab.rate()), "md": round1(md.rate()),
		"seconds_fabraid": round2(fab.secs), "seconds_md": round2(md.secs),
		"bytes_fabraid": fab.bytes, "bytes_md": md.bytes,
		"written_bytes_fabraid": fab.written, "written_bytes_md": md.written,
		"cpu_s_per_gib_fabraid": round2(fab.cpuPerGiB()), "cpu_s_per_gib_md": round2(md.cpuPerGiB()),
		"cpu_s_per_gib_fabraid_by_node": byNode(fab), "cpu_s_per_gib_md_by_node": byNode(md),
		"note_fabraid": fab.note, "note_md": md.note, "method": how,
		"rounds": 1, "kernel": readTrim("/proc/sys/kernel/osrelease")}
	ratio := "–"
	if fab.rate() > 0 && md.rate() > 0 {
		line["ratio"] = round2(fab.rate() / md.rate())
		ratio = fmt.Sprintf("%.2f", fab.rate()/md.rate())
	}
	b, _ := json.Marshal(line)
	fmt.Printf("VMBENCH %s\n", b)
	fmt.Printf("CLUSTERBENCH | %s | MiB/s | %.1f (%.1f MiB in %.1f s) | %.1f (%.1f MiB in %.1f s) | %s | %.1f | %.1f |\n",
		name, fab.rate(), float64(fab.bytes)/(1<<20), fab.secs, md.rate(), float64(md.bytes)/(1<<20), md.secs,
		ratio, fab.cpuPerGiB(), md.cpuPerGiB())
}

// The queue rows (on c, at the end, every node up and both arrays whole):
// the consumer's connection with queue_size 32, 128 (the kernel's
// default) and 1024, for a 1 MiB sequential read at depth 64 and a 4 KiB
// random read at depth 128 (deeper than the main rows, so that the queue
// size can limit them). Both sides through a's benchmark export on the
// same port with the same options: md0, and the fabraid volume's ublk
// device ("fab"), so only the system behind nvmet differs. The guests
// have one vCPU: one I/O queue per connection (nr_io_queues 1). One round
// per queue size, alternating which side goes first.
var queueJobs = []job{
	{"seq_read", "read", "1M", 64, 0, "MiB/s"},
	{"rand_read_4k", "randread", "4k", 128, 0, "IOPS"},
}

var queueSizes = []int{32, 128, 1024}

func queueRows(t *testing.T, g *vmtest.Env, start time.Time, id benchID, mdCtl string) {
	// A second controller with the same host NQN to md0 would join the
	// first's multipath head: the main one goes.
	if err := nvmf.NewHost().Disconnect(mdCtl); err != nil {
		t.Fatalf("disconnect %s: %v", mdCtl, err)
	}
	waitVolume(t, start, func(in api.Volume) bool { return in.State == "optimal" })
	nodes := map[string]string{"a": g.Addr("a"), "b": g.Addr("b")}
	idle := cpuWindow(t, nodes, func() { time.Sleep(10 * time.Second) })
	idleRate := 0.0
	for _, v := range idle {
		idleRate += v / 10
	}
	t0 := time.Now()
	for i, qs := range queueSizes {
		res := map[string]map[string][]sample{}
		order := [][2]string{{"fab", "fabraid"}, {"md0", "md"}}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			dev, ctl := connectBench(t, g, id, o[0], qs)
			cls := filepath.Join("/sys/class/nvme", ctl)
			logf(t, start, "queue_size %d: %s through %s (%s): sqsize %s, queue_count %s (admin included)",
				qs, o[1], dev, ctl, readTrim(cls+"/sqsize"), readTrim(cls+"/queue_count"))
			for _, j := range queueJobs {
				s := fio(t, nodes, j, dev, devSize(t, dev), jobSeconds)
				if res[j.name] == nil {
					res[j.name] = map[string][]sample{}
				}
				res[j.name][o[1]] = append(res[j.name][o[1]], s)
				logf(t, start, "qs%d %s %s (depth %d): %.1f %s, cpu %v s in a %.1f s window, %.3f GiB %s",
					qs, o[1], j.name, j.depth, s.v, j.unit, s.cpu, s.secs, s.gib, s.err)
			}
			if err := nvmf.NewHost().Disconnect(ctl); err != nil {
				t.Errorf("disconnect %s: %v", ctl, err)
			}
		}
		report(t, fmt.Sprintf("qs%d_", qs), queueJobs, res, 1, idleRate)
	}
	logf(t, start, "queue rows in %v", time.Since(t0).Round(time.Second))
}

// flushDevice sends a flush to block device dev (fsync of the device).
func flushDevice(t *testing.T, dev string) {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("flush %s: %v", dev, err)
	}
}

// ublkDev is the volume's ublk block device on its owner.
func ublkDev(t *testing.T, in api.Volume) string {
	if in.Ublk != "" {
		return in.Ublk
	}
	var v api.Volume
	json.Unmarshal(waitVolume(t, time.Now(), func(v api.Volume) bool { return v.Ublk != "" }), &v)
	return v.Ublk
}
