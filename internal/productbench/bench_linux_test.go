//go:build linux

package productbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/benchtools"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// Benchmark shape. Each fio job runs jobSeconds after rampSeconds; three
// rounds alternate md and fabraid; every figure printed is the median of
// the rounds.
const (
	rounds      = 3
	jobSeconds  = 2
	rampSeconds = 1
	virtioDisk  = 256 << 20 // 7 virtio disks: 6 members and a replacement
	nullDiskMB  = 128       // 7 memory-backed null_blk devices
)

// TestBenchProductVM is `make vmbench`'s product benchmark (docs/performance.md).
// CPU profiles of the engine process during three jobs land in
// FABRAID_VMBENCH_PROFILES (default: a new directory under the system
// temp directory), and the top of each is logged.
func TestBenchProductVM(t *testing.T) {
	if !vmtest.InGuest() && os.Getenv("FABRAID_VMBENCH") != "1" {
		t.Skip("benchmark: set FABRAID_VMBENCH=1 (make vmbench)")
	}
	disks := make([]vmtest.Disk, 7)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: virtioDisk}
	}
	guest := vmtest.GuestConfig{Name: "bench", Kernel: vmtest.Kernel612, CPUs: 2, MemoryMB: 2560,
		Modules: []string{"crc32c_generic", "ublk_drv", "nvmet_tcp", "nvme_tcp", "null_blk", "raid456"}, Disks: disks}
	if vmtest.InGuest() {
		vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{guest}}, benchGuest)
		return
	}
	if !vmtest.Enabled() {
		t.Skip("VM test: set FABRAID_VMTEST=1")
	}
	guest.Files = benchTools(t)
	guest.Files["/usr/bin/fabraid"] = vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid")
	guest.Files["/usr/bin/fabraidd"] = vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd")
	profiles := os.Getenv("FABRAID_VMBENCH_PROFILES")
	if profiles == "" {
		var err error
		if profiles, err = os.MkdirTemp("", "fabraid-vmbench-"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(profiles, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(profiles, 0o777)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	timeout := 30 * time.Minute
	outcomes, err := vmtest.Boot(context.Background(), vmtest.BootConfig{
		Guests: []vmtest.GuestConfig{guest}, Timeout: timeout, Binary: exe, Shared: profiles,
		Args: []string{"-test.run", "^TestBenchProductVM$", "-test.v", "-test.timeout", timeout.String()},
		Log:  func(g, line string) { t.Logf("[%s] %s", g, line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outcomes {
		if !o.Passed {
			t.Fatalf("guest %s: %s", o.Name, o.Reason)
		}
	}
	benchtools.LogProfiles(t, profiles)
}

// job is one fio job; slice 0 is the first half of the device, slice 1
// the second.
type job struct {
	name  string
	rw    string
	bs    string
	depth int
	slice int
	unit  string // "MiB/s" or "IOPS"
}

var (
	healthyJobs = []job{
		{"seq_write", "write", "1M", 8, 0, "MiB/s"},
		{"seq_read", "read", "1M", 8, 0, "MiB/s"},
		{"rand_read_4k", "randread", "4k", 32, 0, "IOPS"},
		{"rand_write_4k", "randwrite", "4k", 32, 1, "IOPS"},
	}
	degradedJobs = []job{
		{"degraded_seq_read", "read", "1M", 8, 0, "MiB/s"},
		{"degraded_rand_read_4k", "randread", "4k", 32, 0, "IOPS"},
	}
)

// sample is one measurement: the figure, the guest CPU busy fraction, and
// for fio jobs the 99th percentile of completion latency (ms).
type sample struct{ v, cpu, p99 float64 }

// results collects samples by set, job and target (raw, md, fabraid,
// fabraid_nvme).
type results map[string]map[string][]sample

func (r results) add(job, target string, s sample) {
	if r[job] == nil {
		r[job] = map[string][]sample{}
	}
	r[job][target] = append(r[job][target], s)
}

func median(s []sample) sample {
	if len(s) == 0 {
		return sample{}
	}
	v := make([]float64, len(s))
	c := make([]float64, len(s))
	p := make([]float64, len(s))
	for i, x := range s {
		v[i], c[i], p[i] = x.v, x.cpu, x.p99
	}
	sort.Float64s(v)
	sort.Float64s(c)
	sort.Float64s(p)
	return sample{v[len(v)/2], c[len(c)/2], p[len(p)/2]}
}

func benchGuest(t *testing.T, g *vmtest.Env) {
	os.Setenv("LD_LIBRARY_PATH", toolLib)
	os.Setenv("MDADM_NO_UDEV", "1")
	for _, kv := range [][2]string{{"/proc/sys/dev/raid/speed_limit_min", "10000000"}, {"/proc/sys/dev/raid/speed_limit_max", "10000000"}} {
		if err := os.WriteFile(kv[0], []byte(kv[1]), 0); err != nil {
			t.Fatalf("%s: %v", kv[0], err)
		}
	}
	out, _ := exec.Command(toolBin+"/fio", "--version").CombinedOutput()
	mdv, _ := exec.Command(toolBin+"/mdadm", "--version").CombinedOutput()
	t.Logf("fio %s, mdadm %s", bytes.TrimSpace(out), bytes.TrimSpace(mdv))
	d := startDaemon(t)
	defer d.stop(t)
	sets := []struct {
		name  string
		disks func() []string
	}{
		{"virtio", func() []string { return g.Disks }},
		{"null_blk", func() []string { return nullBlk(t, 7, nullDiskMB) }},
	}
	for _, set := range sets {
		profileDir, profileSet = g.Shared, set.name
		disks := set.disks()
		mustFab(t, append([]string{"drive", "claim", "--force"}, disks...)...)
		r := results{}
		t0 := time.Now()
		for round := range rounds {
			runRaw(t, r, disks[:6])
			order := []func(){func() { runMD(t, r, disks) }, func() { runFabraid(t, r, disks) }}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, f := range order {
				f()
			}
		}
		report(t, set.name, r)
		t.Logf("set %s: %d rounds in %v", set.name, rounds, time.Since(t0).Round(time.Second))
	}
}

// report prints one VMBENCH JSON line per job.
func report(t *testing.T, set string, r results) {
	var names []string
	for _, j := range append(append([]job(nil), healthyJobs...), degradedJobs...) {
		names = append(names, j.name)
	}
	names = append(names, "rebuild", busyRead.name)
	for _, name := range names {
		m := r[name]
		raw, md, fab, nv := median(m["raw"]), median(m["md"]), median(m["fabraid"]), median(m["fabraid_nvme"])
		unit := "MiB/s"
		if strings.Contains(name, "4k") {
			unit = "IOPS"
		}
		line := map[string]any{"bench": "product", "set": set, "job": name, "unit": unit,
			"md": round1(md.v), "fabraid": round1(fab.v),
			"cpu_md": round2(md.cpu), "cpu_fabraid": round2(fab.cpu), "rounds": len(m["fabraid"])}
		if md.v > 0 {
			line["ratio"] = round2(fab.v / md.v) // fabraid / md
		}
		if raw.v > 0 {
			line["raw"] = round1(raw.v)
			line["cpu_raw"] = round2(raw.cpu)
			line["fabraid_raw"] = round2(fab.v / raw.v)
		}
		if nv.v > 0 {
			line["fabraid_nvme"] = round1(nv.v)
			line["cpu_fabraid_nvme"] = round2(nv.cpu)
			if md.v > 0 {
				line["nvme_md"] = round2(nv.v / md.v)
			}
		}
		if h := median(r[strings.TrimPrefix(name, "degraded_")]["fabraid"]); strings.HasPrefix(name, "degraded_") && h.v > 0 {
			line["fabraid_degraded_healthy"] = round2(fab.v / h.v)
			if hm := median(r[strings.TrimPrefix(name, "degraded_")]["md"]); hm.v > 0 {
				line["md_degraded_healthy"] = round2(md.v / hm.v)
			}
		}
		if unit == "IOPS" {
			line["p99_ms_md"], line["p99_ms_fabraid"] = round2(md.p99), round2(fab.p99)
		}
		if name == busyRead.name {
			// The same job on the same degraded array just before the
			// rebuild began.
			d := r["degraded_rand_read_4k"]
			line["p99_ms_md_no_rebuild"], line["p99_ms_fabraid_no_rebuild"] = round2(median(d["md"]).p99), round2(median(d["fabraid"]).p99)
		}
		b, _ := json.Marshal(line)
		fmt.Printf("VMBENCH %s\n", b)
	}
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// cpuBusy samples /proc/stat: busy and total jiffies.
func cpuTimes() (busy, total uint64) {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// fio runs j on devs (one fio job per device, reported as their sum) over
// the slice of size bytes each, and returns the figure and the CPU busy
// fraction.
func fio(t *testing.T, j job, devs []string, size int64) sample {
	t.Helper()
	return fioRun(t, j, devs, size, jobSeconds)
}

func fioRun(t *testing.T, j job, devs []string, size int64, seconds int) sample {
	t.Helper()
	half := size / 2 / (1 << 20) * (1 << 20)
	args := []string{"--output-format=json", "--group_reporting", "--direct=1", "--ioengine=libaio",
		"--rw=" + j.rw, "--bs=" + j.bs, "--iodepth=" + strconv.Itoa(j.depth), "--time_based",
		fmt.Sprintf("--runtime=%d", seconds), fmt.Sprintf("--ramp_time=%d", rampSeconds),
		fmt.Sprintf("--offset=%d", int64(j.slice)*half), fmt.Sprintf("--size=%d", half), "--randrepeat=0", "--norandommap"}
	for i, d := range devs {
		args = append(args, fmt.Sprintf("--name=%s%d", j.name, i), "--filename="+d)
	}
	b0, t0 := cpuTimes()
	out, err := exec.Command(toolBin+"/fio", args...).Output()
	b1, t1 := cpuTimes()
	if err != nil {
		t.Fatalf("fio %s on %v: %v\n%s", j.name, devs, err, out)
	}
	var res struct {
		Jobs []struct {
			Read, Write struct {
				BW    float64 `json:"bw"` // KiB/s
				IOPS  float64 `json:"iops"`
				ClatN struct {
					Percentile map[string]float64 `json:"percentile"`
				} `json:"clat_ns"`
			}
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		t.Fatalf("fio %s: output: %v\n%s", j.name, err, out)
	}
	st := res.Jobs[0].Read
	if strings.Contains(j.rw, "write") {
		st = res.Jobs[0].Write
	}
	v := st.BW / 1024
	if j.unit == "IOPS" {
		v = st.IOPS
	}
	cpu := 0.0
	if t1 > t0 {
		cpu = float64(b1-b0) / float64(t1-t0)
	}
	return sample{v, cpu, st.ClatN.Percentile["99.000000"] / 1e6}
}

// busyRead is the foreground job that runs while a member is rebuilt
// (issue 26): the degraded 4 KiB random read, whose p99 without a rebuild
// is measured just before.
var busyRead = job{"rebuild_rand_read_4k", "randread", "4k", 32, 0, "IOPS"}

func devSize(t *testing.T, dev string) int64 {
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Seek(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func runRaw(t *testing.T, r results, devs []string) {
	size := devSize(t, devs[0])
	for _, j := range healthyJobs {
		r.add(j.name, "raw", fio(t, j, devs, size))
	}
}

// awaitFree waits until every device can be opened exclusively: a
// stopped engine's members are released once the kernel has torn down its
// io_uring instances, asynchronously after the process exited.
func awaitFree(t *testing.T, devs []string) {
	deadline := time.Now().Add(30 * time.Second)
	for _, d := range devs {
		for {
			f, err := os.OpenFile(d, os.O_RDONLY|syscall.O_EXCL, 0)
			if err == nil {
				f.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still busy after 30 s: %v", d, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// wipe zeroes the first MiB of each device: md's and fabraid's metadata.
func wipe(t *testing.T, devs []string) {
	z := make([]byte, 1<<20)
	for _, d := range devs {
		f, err := os.OpenFile(d, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(z, 0); err != nil {
			t.Fatal(err)
		}
		f.Sync()
		f.Close()
	}
}

// mdadm runs mdadm, retrying while a device is briefly held elsewhere
// (fabraidd's drive scan opens claimed drives exclusively for a moment).
func mdadm(t *testing.T, args ...string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(toolBin+"/mdadm", args...)
		cmd.Stdin = strings.NewReader("y\n")
		out, err := cmd.CombinedOutput()
		if err == nil {
			return string(out)
		}
		busy := bytes.Contains(out, []byte("busy")) || bytes.Contains(out, []byte("open"))
		if !busy || attempt >= 50 {
			t.Fatalf("mdadm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "--create" {
			// A failed attempt may leave an inactive md0 holding
			// some of the disks.
			exec.Command(toolBin+"/mdadm", "--stop", "/dev/md0").Run()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

// runMD measures md RAID-6 (64 KiB chunk, --assume-clean) on disks[:6]:
// the healthy jobs, the degraded jobs with disks[0] failed, and the
// recovery onto disks[6].
func runMD(t *testing.T, r results, disks []string) {
	awaitFree(t, disks)
	wipe(t, disks)
	mdadm(t, append([]string{"--create", "/dev/md0", "--run", "--level=6", "--raid-devices=6", "--chunk=64",
		"--metadata=1.2", "--assume-clean", "--bitmap=none"}, disks[:6]...)...)
	defer func() {
		mdadm(t, "--stop", "/dev/md0")
		wipe(t, disks)
	}()
	size := devSize(t, "/dev/md0")
	for _, j := range healthyJobs {
		r.add(j.name, "md", fio(t, j, []string{"/dev/md0"}, size))
	}
	mdadm(t, "/dev/md0", "--fail", disks[0])
	for _, j := range degradedJobs {
		r.add(j.name, "md", fio(t, j, []string{"/dev/md0"}, size))
	}
	mdadm(t, "/dev/md0", "--remove", disks[0])
	compKiB, _ := strconv.ParseInt(readTrim("/sys/block/md0/md/component_size"), 10, 64)
	b0, c0 := cpuTimes()
	t0 := time.Now()
	mdadm(t, "/dev/md0", "--add", disks[6])
	r.add(busyRead.name, "md", fio(t, busyRead, []string{"/dev/md0"}, size))
	for {
		time.Sleep(50 * time.Millisecond)
		if readTrim("/sys/block/md0/md/sync_action") == "idle" && readTrim("/sys/block/md0/md/degraded") == "0" {
			break
		}
		if time.Since(t0) > 10*time.Minute {
			t.Fatal("md recovery did not finish in 10 min")
		}
	}
	sec := time.Since(t0).Seconds()
	b1, c1 := cpuTimes()
	r.add("rebuild", "md", sample{v: float64(compKiB) / 1024 / sec, cpu: float64(b1-b0) / float64(c1-c0)})
}

// runFabraid measures a fabraid 4+2 volume (64 KiB chunk) created through
// fabraidd on disks[:6]: the healthy jobs through /dev/ublkbN and the
// NVMe/TCP head, the degraded jobs with slot 0 failed, and the rebuild
// of slot 0 onto disks[6].
func runFabraid(t *testing.T, r results, disks []string) {
	awaitFree(t, disks)
	wipe(t, disks)
	var in api.Volume
	out := mustFab(t, "volume", "create", "bench", "--data", "4", "--parity", "2", "--drives", strings.Join(disks[:6], ","), "--json")
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("volume create: %v: %s", err, out)
	}
	defer mustFab(t, "volume", "delete", "bench", "--yes")
	for _, j := range healthyJobs {
		r.add(j.name, "fabraid", fio(t, j, []string{in.Ublk}, in.Size))
	}
	for _, j := range healthyJobs {
		r.add(j.name, "fabraid_nvme", fio(t, j, []string{in.Device}, in.Size))
	}
	if profileDir != "" {
		for _, j := range profiledJobs {
			profileJob(t, j, in, filepath.Join(profileDir, fmt.Sprintf("%s-%s.pprof", profileSet, j.name)))
		}
		profileDir = ""
	}
	mustFab(t, "volume", "fail", "bench", "0")
	for _, j := range degradedJobs {
		r.add(j.name, "fabraid", fio(t, j, []string{in.Ublk}, in.Size))
	}
	b0, c0 := cpuTimes()
	mustFab(t, "volume", "replace", "bench", "0", disks[6])
	r.add(busyRead.name, "fabraid", fio(t, busyRead, []string{in.Ublk}, in.Size))
	after := awaitRebuilt(t)
	b1, c1 := cpuTimes()
	member := float64(in.Size / int64(in.K))
	r.add("rebuild", "fabraid", sample{v: member / (1 << 20) / after.LastTask.Seconds, cpu: float64(b1-b0) / float64(c1-c0)})
}

// awaitRebuilt waits until the bench volume's rebuild ended and returns
// the volume then.
func awaitRebuilt(t *testing.T) api.Volume {
	t.Helper()
	for t0 := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		var v api.Volume
		if err := json.Unmarshal([]byte(mustFab(t, "volume", "show", "bench", "--json")), &v); err != nil {
			t.Fatal(err)
		}
		if v.Task == "" && v.LastTask != nil && v.LastTask.Kind == "rebuild" {
			if v.LastTask.Error != "" || v.LastTask.Seconds <= 0 {
				t.Fatalf("rebuild: %+v", v.LastTask)
			}
			return v
		}
		if time.Since(t0) > 10*time.Minute {
			t.Fatalf("rebuild did not end in 10 min: state %s, task %q", v.State, v.Task)
		}
	}
}

func mustFab(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("/usr/bin/fabraid", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("fabraid %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

type daemon struct {
	cmd  *exec.Cmd
	done chan error
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	logf, err := os.Create("/tmp/fabraidd.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/fabraidd")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	for range 300 {
		if err := exec.Command("/usr/bin/fabraid", "volume", "list").Run(); err == nil {
			return d
		}
		select {
		case err := <-d.done:
			b, _ := os.ReadFile("/tmp/fabraidd.log")
			t.Fatalf("fabraidd exited: %v\n%s", err, b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("fabraidd: no API after 30s")
	return nil
}

func (d *daemon) stop(t *testing.T) {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		t.Error("fabraidd did not stop in 20s")
	}
	if t.Failed() {
		b, _ := os.ReadFile("/tmp/fabraidd.log")
		t.Logf("fabraidd log:\n%s", b)
	}
}

// nullBlk creates n memory-backed null_blk devices of sizeMB (4 KiB
// blocks) through configfs.
func nullBlk(t *testing.T, n, sizeMB int) []string {
	t.Helper()
	var paths []string
	for i := range n {
		dir := filepath.Join("/sys/kernel/config/nullb", fmt.Sprintf("nb%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, kv := range [][2]string{{"memory_backed", "1"}, {"size", strconv.Itoa(sizeMB)}, {"blocksize", "4096"},
			{"irqmode", "0"}, {"power", "1"}} {
			if err := os.WriteFile(filepath.Join(dir, kv[0]), []byte(kv[1]), 0); err != nil {
				t.Fatalf("%s/%s: %v", dir, kv[0], err)
			}
		}
		paths = append(paths, "/dev/"+filepath.Base(dir))
	}
	return paths
}

// Profiles: the first fabraid round of each set runs profiledJobs once
// more, for profileSeconds+2 s, while the engine's CPU profile is taken
// over its socket (not part of the figures).
var (
	profiledJobs           = healthyJobs
	profileDir, profileSet string
)

const profileSeconds = 6

func profileJob(t *testing.T, j job, in api.Volume, out string) {
	done := make(chan error, 1)
	go func() { done <- benchtools.EngineProfile(in.UUID, profileSeconds, out) }()
	long := j
	fioRun(t, long, []string{in.Ublk}, in.Size, profileSeconds+2)
	if err := <-done; err != nil {
		t.Errorf("profile of %s: %v", j.name, err)
	}
}
