//go:build linux

package clusterbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/benchtools"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Benchmark shape. Every fio job runs jobSeconds after rampSeconds on the
// consumer's device; FABRAID_CLUSTERBENCH_ROUNDS rounds (default 3)
// alternate fabraid and md, and each figure is the median of the rounds.
const (
	jobSeconds  = 4
	rampSeconds = 1
	memberBytes = 64 << 20 // every member virtio disk (disks 0-5 of a guest)
	stateBytes  = 32 << 20 // disk 6: b's state directory, so b comes back as itself
	// mdService is the nvme-tcp service id of the reference's exports
	// (fabraid uses 4420 for volumes and 4421 for drives).
	mdService = "4430"
)

// job is one fio job; slice 0 is the first half of the device, slice 1
// the second (productbench's healthy jobs).
type job struct {
	name  string
	rw    string
	bs    string
	depth int
	slice int
	unit  string // "MiB/s" or "IOPS"
}

// Disks of every guest, by index in Env.Disks: fabraid's two members,
// md's two, a spare drive for each side (used on b by the rebuild phase)
// and a small state disk (used on b, which is powered off and back).
const (
	diskFabSpare = 4
	diskMDSpare  = 5
	diskState    = 6
)

var jobs = []job{
	{"seq_write", "write", "1M", 8, 0, "MiB/s"},
	{"seq_read", "read", "1M", 8, 0, "MiB/s"},
	{"rand_read_4k", "randread", "4k", 32, 0, "IOPS"},
	{"rand_write_4k", "randwrite", "4k", 32, 1, "IOPS"},
}

// TestClusterBenchVM is `make clusterbench` (docs/performance.md, "Cluster
// benchmark"). It is a benchmark, not a test: it skips unless
// FABRAID_VMTEST=1 and FABRAID_VMBENCH=1. CPU profiles of the owner's
// engine during one more run of each job land in
// FABRAID_CLUSTERBENCH_PROFILES (default: a new directory under the
// system temp directory), and the top of each is logged.
func TestClusterBenchVM(t *testing.T) {
	if vmtest.InGuest() {
		vmtest.Run(t, vmtest.Options{}, benchGuest)
		return
	}
	if os.Getenv("FABRAID_VMBENCH") != "1" || !vmtest.Enabled() {
		t.Skip("benchmark: set FABRAID_VMTEST=1 FABRAID_VMBENCH=1 (make clusterbench)")
	}
	n := rounds(t)
	kernel, zeroCopy, only := benchKernel(t), benchZeroCopy(t), healthyOnly()
	files := benchtools.Files(t)
	files["/usr/bin/fabraid"] = vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid")
	files["/usr/bin/fabraidd"] = vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd")
	mods := []string{"nvmet", "nvmet_tcp", "nvme_tcp", "ublk_drv", "crc32c_generic", "raid456", "ext4"}
	if kernel == vmtest.Kernel7 {
		mods = slices.DeleteFunc(mods, func(m string) bool { return m == "crc32c_generic" }) // a library in 7.x, built in
	}
	var guests []vmtest.GuestConfig
	for _, name := range []string{"a", "b", "c"} {
		disks := make([]vmtest.Disk, diskState+1)
		for i := range disks {
			disks[i] = vmtest.Disk{Size: memberBytes}
		}
		disks[diskState].Size = stateBytes
		guests = append(guests, vmtest.GuestConfig{Name: name, Kernel: kernel, Modules: mods,
			MemoryMB: 1024, Disks: disks, Files: files})
	}
	shared := os.Getenv("FABRAID_CLUSTERBENCH_PROFILES")
	if shared == "" {
		var err error
		if shared, err = os.MkdirTemp("", "fabraid-clusterbench-"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	timeout := 25*time.Minute + time.Duration(n)*8*time.Minute
	t0 := time.Now()
	outcomes, err := vmtest.Boot(context.Background(), vmtest.BootConfig{
		Guests: guests, Timeout: timeout, Binary: exe, Shared: shared,
		Args: []string{"-test.run", "^TestClusterBenchVM$", "-test.v", "-test.timeout", timeout.String()},
		Env: map[string]string{"FABRAID_CLUSTERBENCH_ROUNDS": strconv.Itoa(n), "FABRAID_CLUSTERBENCH_ZEROCOPY": zeroCopy,
			"FABRAID_CLUSTERBENCH_PHASES": map[bool]string{true: "healthy"}[only]},
		Log: func(g, line string) { t.Logf("[%s] %s", g, line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guests done in %v", time.Since(t0).Round(time.Second))
	// What the guests exchanged (tokens, NVMe secrets, events) goes; the
	// profiles stay.
	ents, _ := os.ReadDir(shared)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".pprof") {
			os.RemoveAll(filepath.Join(shared, e.Name()))
		}
	}
	for _, o := range outcomes {
		if !o.Passed {
			t.Errorf("guest %s: %s", o.Name, o.Reason)
		}
	}
	benchtools.LogProfiles(t, shared)
}

// rounds is FABRAID_CLUSTERBENCH_ROUNDS (default 3); the host passes it
// to the guests.
func rounds(t *testing.T) int {
	s := os.Getenv("FABRAID_CLUSTERBENCH_ROUNDS")
	if s == "" {
		return 3
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FABRAID_CLUSTERBENCH_ROUNDS=%q: want a positive number", s)
	}
	return n
}

// benchKernel is the guests' kernel: FABRAID_CLUSTERBENCH_KERNEL, 6.12
// (default) or 7 (Debian sid's 7.x, whose ublk reads zero copy).
func benchKernel(t *testing.T) string {
	switch k := os.Getenv("FABRAID_CLUSTERBENCH_KERNEL"); k {
	case "", vmtest.Kernel612:
		return vmtest.Kernel612
	case vmtest.Kernel7:
		return vmtest.Kernel7
	default:
		t.Fatalf("FABRAID_CLUSTERBENCH_KERNEL=%q: want %s or %s", k, vmtest.Kernel612, vmtest.Kernel7)
		return ""
	}
}

// benchZeroCopy is fabraidd's ublk_zero_copy in the guests:
// FABRAID_CLUSTERBENCH_ZEROCOPY, auto (default) or off.
func benchZeroCopy(t *testing.T) string {
	switch z := os.Getenv("FABRAID_CLUSTERBENCH_ZEROCOPY"); z {
	case "", "auto":
		return "auto"
	case "off":
		return "off"
	default:
		t.Fatalf("FABRAID_CLUSTERBENCH_ZEROCOPY=%q: want auto or off", z)
		return ""
	}
}

// healthyOnly is FABRAID_CLUSTERBENCH_PHASES=healthy: the healthy rounds
// only (no profiles, no node down, no recovery or queue rows).
func healthyOnly() bool { return os.Getenv("FABRAID_CLUSTERBENCH_PHASES") == "healthy" }

// benchGuest: every guest serves its CPU counters, runs fabraidd with its
// first two disks claimed and joins the cluster; a creates the volume and
// builds md; b and c export their md disks to a; c measures the rows
// through the consumer devices, a the resync and rebuild rows (returning
// b's members, then a spare of b's onto a failed member of b's).
func benchGuest(t *testing.T, g *vmtest.Env) {
	start := time.Now()
	self = g.Name
	os.Setenv("LD_LIBRARY_PATH", benchtools.Lib)
	os.Setenv("MDADM_NO_UDEV", "1")
	serveCPU(t)
	if g.Name == "b" {
		mountState(t, g)
		if g.BootNum > 1 {
			returnedB(t, g, start)
			return
		}
	}
	id := benchIdentity(t, g)
	startFabraidd(t, g, g.Disks[:2])
	formCluster(t, g, start)
	switch g.Name {
	case "a":
		// md's resync and recovery at full speed, as make vmbench.
		for _, f := range []string{"/proc/sys/dev/raid/speed_limit_min", "/proc/sys/dev/raid/speed_limit_max"} {
			if err := os.WriteFile(f, []byte("10000000"), 0); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		g.Wait(t, "c", "joined")
		var in api.Volume
		if err := json.Unmarshal([]byte(createVolume(t)), &in); err != nil {
			t.Fatal(err)
		}
		logf(t, start, "volume v %s: owner %s, state %s, %d bytes, chunk %d, journal %v (%d bytes), owner journal %d, ublk %s",
			in.UUID, in.Owner, in.State, in.Size, in.ChunkSize, in.Journal, in.JournalBytes, in.OwnerJournal, in.Ublk)
		checkJournal(t, start, in)
		domains := map[string]int{}
		for _, m := range in.Members {
			domains[m.Domain]++
		}
		if in.Owner != "a" || len(in.Members) != 6 || domains["a"] != 2 || domains["b"] != 2 || domains["c"] != 2 {
			t.Fatalf("volume v: owner %q, members %+v; want owner a and two members on each node", in.Owner, in.Members)
		}
		g.Signal(t, "created")
		var remote []string
		for _, n := range []string{"b", "c"} {
			g.Wait(t, n, "exported")
			remote = append(remote, importDisks(t, g, id, n, "d0", "d1")...)
		}
		members := append(append([]string(nil), g.Disks[2:4]...), remote...)
		mdCreate(t, members)
		exportMD(t, g, readIdentity(t, g, "c"), ublkDev(t, in))
		logf(t, start, "md0 (RAID-6, 64 KiB chunk) over %v exported to c", members)
		g.Signal(t, "md")
		logEngine(t, start, in.UUID)
		if healthyOnly() {
			// Before b and c end (a alone has no etcd quorum).
			g.Wait(t, "c", "healthy-done")
			logPlanned(t, start, "after the healthy rows")
			g.Signal(t, "planned")
			g.Wait(t, "c", "done")
			logKernelReports(t, start)
			return
		}
		for _, j := range jobs {
			profileEngine(t, g, in.UUID, j.name)
		}
		g.Wait(t, "c", "healthy-done")
		logPlanned(t, start, "after the healthy rows")
		mdBitmap(t, start)
		g.Signal(t, "bitmap")
		g.Wait(t, "c", "b-down")
		degradeMD(t, start, remote[:2])
		g.Signal(t, "md-degraded")
		g.Wait(t, "c", "degraded-done")
		logPlanned(t, start, "after the degraded rows")
		recovery(t, g, start, id)
		g.Signal(t, "rebuilt")
		g.Wait(t, "c", "done")
		logKernelReports(t, start)
	case "b":
		exportDisks(t, g, readIdentity(t, g, "a"))
		g.Signal(t, "exported")
		g.Wait(t, "c", "done") // powered off meanwhile
	case "c":
		exportDisks(t, g, readIdentity(t, g, "a"))
		g.Signal(t, "exported")
		g.Wait(t, "a", "created")
		fab := waitHead(t, start)
		g.Wait(t, "a", "md")
		md, mdCtl := connectMD(t, g, id, 0)
		logf(t, start, "consumer devices: fabraid %s, md %s", fab, md)
		measure(t, g, start, fab, md)
		if healthyOnly() {
			g.Signal(t, "healthy-done")
			g.Wait(t, "a", "planned")
			g.Signal(t, "done")
			return
		}
		g.Wait(t, "a", "rebuilt")
		queueRows(t, g, start, id, mdCtl)
		g.Signal(t, "done")
	}
}

// target is one of the two systems under test as the consumer sees it.
type target struct {
	name string // "fabraid" or "md"
	dev  string // /dev/nvmeXnY on the consumer
}

// sample is one fio run: the figure (MiB/s or IOPS), the guest CPU
// seconds of each node during it, and the GiB that crossed the consumer's
// device in the same window.
type sample struct {
	v    float64
	cpu  map[string]float64
	gib  float64
	secs float64 // wall time of the window
	// drives: requests completed by the member disks of every guest up
	// in the window (driveRequests), after every merge above them.
	drives float64
	// headWriteKiB: the mean size of the writes the system under test
	// (ublk or md device) received in the window.
	headWriteKiB float64
	err          string
}

// cpuPerGiB is the CPU seconds of the guests per GiB moved.
func (s sample) cpuPerGiB() float64 {
	total := 0.0
	for _, c := range s.cpu {
		total += c
	}
	if s.gib <= 0 {
		return 0
	}
	return total / s.gib
}

// measure (on c) preconditions both devices, runs the healthy rounds,
// powers b off (a node that is neither owner nor consumer: two members of
// each array) and runs the degraded rounds.
func measure(t *testing.T, g *vmtest.Env, start time.Time, fabDev, mdDev string) {
	targets := []target{{"fabraid", fabDev}, {"md", mdDev}}
	nodes := map[string]string{"a": g.Addr("a"), "b": g.Addr("b")}
	for _, tg := range targets {
		size := devSize(t, tg.dev)
		pre := job{"precondition", "write", "1M", 8, 0, "MiB/s"}
		s := fio(t, nodes, pre, tg.dev, size, 0)
		logf(t, start, "%s: %s written once (%d MiB): %.1f MiB/s %s", tg.name, tg.dev, size>>20, s.v, s.err)
	}
	phase(t, g, start, "", nodes, targets, "optimal")
	if healthyOnly() {
		return
	}
	for _, j := range jobs {
		// Not part of the figures: a takes the engine's CPU profile
		// while fio runs. The profile starts once fio is past its ramp
		// and fio runs on until a says the profile is done (signals take
		// seconds on a loaded host); fio's own figure is not used.
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			fio(t, nodes, j, fabDev, devSize(t, fabDev), profileSeconds+profileSlack)
		}()
		time.Sleep(time.Duration(rampSeconds+1) * time.Second)
		g.Signal(t, "profile-"+j.name)
		g.Wait(t, "a", "profiled-"+j.name)
		<-ran
	}

	// fabraid clears write-intent bits only in a flush (two clean
	// sessions: a region idle between them is cleared), md on its own
	// timer; fio's O_DIRECT writes never flush. A consumer with a file
	// system flushes: c flushes both devices twice before b goes down,
	// so that each bitmap holds what was written while b was away.
	for _, tg := range targets {
		for range 2 {
			flushDevice(t, tg.dev)
			time.Sleep(time.Second)
		}
	}
	logf(t, start, "both consumer devices flushed twice")
	g.Signal(t, "healthy-done")
	g.Wait(t, "a", "bitmap") // md's write-intent bitmap for the resync row
	logf(t, start, "powering b off")
	g.Kill(t, "b")
	g.Signal(t, "b-down")
	// The engine fails b's members on the I/O errors of their lost paths
	// (as md does on a): read through the head meanwhile.
	stop := readLoop(t, fabDev)
	waitVolume(t, start, func(in api.Volume) bool {
		failed := 0
		for _, m := range in.Members {
			if m.Domain == "b" && strings.Contains(m.Role, "fail") {
				failed++
			}
		}
		return in.State == "degraded" && failed == 2
	})
	stop()
	g.Wait(t, "a", "md-degraded")
	phase(t, g, start, "degraded_", map[string]string{"a": g.Addr("a")}, targets, "degraded")
	g.Signal(t, "degraded-done")
}

// phase measures the idle background, runs the rounds of every job on
// both targets (alternating which goes first) and prints the report, the
// rows named prefix+job. nodes are the other guests that are up; the
// fabraid volume must be in state want before each of its rounds.
func phase(t *testing.T, g *vmtest.Env, start time.Time, prefix string, nodes map[string]string, targets []target, want string) {
	n := rounds(t)
	var top map[string]string
	idle := cpuWindow(t, nodes, func() {
		top = topProcs(t, nodes, 6, func() {
			// This node's fabraidd (no engine here) while idle.
			prof := filepath.Join(g.Shared, self+"-fabraidd-"+prefix+"idle.pprof")
			if err := benchtools.SocketProfile("/run/fabraid/api.sock", 10, prof); err != nil {
				t.Errorf("profile of the idle fabraidd: %v", err)
			}
		})
	})
	idleRate := 0.0
	for _, v := range idle {
		idleRate += v / 10
	}
	logf(t, start, "%sidle guest CPU over 10 s (etcd, daemons, keep-alives): %v s", prefix, idle)
	for _, n := range slices.Sorted(maps.Keys(top)) {
		logf(t, start, "%sidle CPU-s on %s by command: %s", prefix, n, top[n])
	}
	res := map[string]map[string][]sample{}
	t0 := time.Now()
	for r := range n {
		order := targets
		if r%2 == 1 {
			order = []target{targets[1], targets[0]}
		}
		for _, tg := range order {
			if tg.name == "fabraid" {
				// A member path that missed a keep-alive while the guests
				// were starved of CPU is failed and re-added (resync):
				// measure the volume in the state of the phase only.
				waitVolume(t, start, func(in api.Volume) bool { return in.State == want })
			}
			size := devSize(t, tg.dev)
			for _, j := range jobs {
				s := fio(t, nodes, j, tg.dev, size, jobSeconds)
				if res[j.name] == nil {
					res[j.name] = map[string][]sample{}
				}
				res[j.name][tg.name] = append(res[j.name][tg.name], s)
				logf(t, start, "round %d %s %s%s: %.1f %s, cpu %v s in a %.1f s window, %.3f GiB, %.0f drive requests, writes of %.0f KiB at the device %s",
					r+1, tg.name, prefix, j.name, s.v, j.unit, s.cpu, s.secs, s.gib, s.drives, s.headWriteKiB, s.err)
			}
		}
	}
	report(t, prefix, jobs, res, n, idleRate)
	logf(t, start, "%s%d rounds in %v", prefix, n, time.Since(t0).Round(time.Second))
}

// med is the median of xs (0 for none).
func med(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// summary is a row's medians for one target: the figure, CPU s/GiB in
// total and by node, and the errors of failed runs.
type summary struct {
	v, cpu float64
	drives float64 // member disk requests per GiB moved
	byNode map[string]float64
	errs   []string
	ok     int
}

func summarize(ss []sample) summary {
	var v, c, d []float64
	per := map[string][]float64{}
	var sum summary
	for _, s := range ss {
		if s.err != "" {
			sum.errs = append(sum.errs, s.err)
			continue
		}
		sum.ok++
		v = append(v, s.v)
		c = append(c, s.cpuPerGiB())
		if s.gib > 0 {
			d = append(d, s.drives/s.gib)
		}
		for n, x := range s.cpu {
			if s.gib > 0 {
				per[n] = append(per[n], x/s.gib)
			}
		}
	}
	sum.v, sum.cpu, sum.drives = med(v), med(c), med(d)
	sum.byNode = map[string]float64{}
	for n, xs := range per {
		sum.byNode[n] = round2(med(xs))
	}
	return sum
}

// report prints one VMBENCH JSON line per row and a table.
func report(t *testing.T, prefix string, js []job, res map[string]map[string][]sample, n int, idle float64) {
	kernel := readTrim("/proc/sys/kernel/osrelease")
	tcg := !strings.Contains(readTrim("/sys/devices/system/clocksource/clocksource0/available_clocksource"), "kvm-clock")
	table := []string{
		"| row | unit | fabraid | md | fabraid/md | CPU s/GiB fabraid | CPU s/GiB md | drive I/Os per MiB fabraid | md |",
		"|---|---|---|---|---|---|---|---|---|",
	}
	for _, j := range js {
		fab, md := summarize(res[j.name]["fabraid"]), summarize(res[j.name]["md"])
		line := map[string]any{"bench": "cluster", "name": prefix + j.name, "unit": j.unit,
			"fabraid": round1(fab.v), "md": round1(md.v),
			"cpu_s_per_gib_fabraid": round2(fab.cpu), "cpu_s_per_gib_md": round2(md.cpu),
			"cpu_s_per_gib_fabraid_by_node": fab.byNode, "cpu_s_per_gib_md_by_node": md.byNode,
			"drive_ios_per_mib_fabraid": round2(fab.drives / 1024), "drive_ios_per_mib_md": round2(md.drives / 1024),
			"idle_cpu_s_per_s": round2(idle),
			"rounds":           min(fab.ok, md.ok), "kernel": kernel, "tcg": tcg}
		ratio := "–"
		if md.v > 0 && fab.v > 0 {
			line["ratio"] = round2(fab.v / md.v)
			ratio = fmt.Sprintf("%.2f", fab.v/md.v)
		}
		if errs := append(fab.errs, md.errs...); len(errs) > 0 {
			line["errors"] = errs
		}
		b, _ := json.Marshal(line)
		fmt.Printf("VMBENCH %s\n", b)
		cell := func(s summary) string {
			if s.ok == 0 {
				return "failed"
			}
			return fmt.Sprintf("%.1f", s.v)
		}
		table = append(table, fmt.Sprintf("| %s | %s | %s | %s | %s | %.1f | %.1f | %.2f | %.2f |",
			prefix+j.name, j.unit, cell(fab), cell(md), ratio, fab.cpu, md.cpu, fab.drives/1024, md.drives/1024))
	}
	fmt.Printf("CLUSTERBENCH kernel %s, tcg %v, %d rounds (median), consumer c, owner a, idle guest CPU %.2f s/s\n", kernel, tcg, n, idle)
	for _, l := range table {
		fmt.Printf("CLUSTERBENCH %s\n", l)
	}
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func logf(t *testing.T, start time.Time, format string, a ...any) {
	t.Helper()
	t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

// connectMD (on c) connects to a's md0 export with the timeouts of a
// fabraid volume path and returns its block device and controller.
// queueSize 0 is the kernel's default (128).
func connectMD(t *testing.T, g *vmtest.Env, id benchID, queueSize int) (dev, ctl string) {
	return connectBench(t, g, id, "md0", queueSize)
}

// connectBench (on c) connects to a's export name ("md0", or "fab": the
// fabraid volume's ublk device exported the same way, for the queue
// rows) with the timeouts of a fabraid volume path.
func connectBench(t *testing.T, g *vmtest.Env, id benchID, name string, queueSize int) (dev, ctl string) {
	t.Helper()
	tm, err := nvmf.Profile(nvmf.ProfileVolumePath)
	if err != nil {
		t.Fatal(err)
	}
	return connectCtl(t, nvmf.Options{Transport: nvmf.TCP, Address: g.Addr("a"), ServiceID: mdService,
		NQN: subsysNQN("a", name), HostNQN: id.NQN, HostID: id.ID, Timeouts: &tm, DHCHAPSecret: id.Secret,
		QueueSize: queueSize})
}

// existingController is the controller h already has to o's subsystem
// at o's address.
func existingController(h *nvmf.Host, o nvmf.Options) (nvmf.Controller, error) {
	cs, err := h.Sysfs.Controllers()
	if err != nil {
		return nvmf.Controller{}, err
	}
	if found := nvmf.FindControllers(cs, o.NQN, o.Address, o.ServiceID); len(found) > 0 {
		return found[0], nil
	}
	return nvmf.Controller{}, fmt.Errorf("%s at %s:%s: already connected, but no such controller in sysfs", o.NQN, o.Address, o.ServiceID)
}

// connect creates a controller and returns its namespace's block device.
func connect(t *testing.T, o nvmf.Options) string {
	t.Helper()
	dev, _ := connectCtl(t, o)
	return dev
}

// connectCtl creates a controller and returns its namespace's block device
// and the controller's name.
func connectCtl(t *testing.T, o nvmf.Options) (dev, ctl string) {
	t.Helper()
	h := nvmf.NewHost()
	var c nvmf.Controller
	var err error
	for i := 0; ; i++ {
		if c, err = h.Connect(o); err == nil {
			break
		}
		if errors.Is(err, nvmf.ErrAlreadyConnected) {
			// The controller of an earlier connection is still
			// reconnecting: its ctrl_loss_tmo has not run out, and when
			// it does the controller and its namespace go. Delete it
			// now and connect anew.
			if old, ferr := existingController(h, o); ferr == nil {
				if derr := h.Disconnect(old.Name); derr != nil {
					err = fmt.Errorf("%w; deleting the reconnecting %s: %w", err, old.Name, derr)
				}
			}
		}
		if i == 20 {
			t.Fatalf("%v", err)
		}
		time.Sleep(time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err = h.WaitPaths(ctx, c.Name, 1)
	if err != nil {
		t.Fatalf("%s (%s): %v", c.Name, o.NQN, err)
	}
	return "/dev/" + c.Paths[0].Head, c.Name
}
