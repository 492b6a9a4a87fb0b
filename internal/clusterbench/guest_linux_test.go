//go:build linux

package clusterbench

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/benchtools"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// CPU accounting. Every guest answers on cpuPort with its busy jiffies
// (/proc/stat "cpu" line: user, nice, system, irq, softirq, steal; not
// idle or iowait). USER_HZ is 100 on x86-64.
const (
	cpuPort = 7999
	userHZ  = 100
)

func busyJiffies() uint64 {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		if i < len(f) {
			v, _ := strconv.ParseUint(f[i], 10, 64)
			busy += v
		}
	}
	return busy
}

// serveCPU answers every connection on cpuPort with busyJiffies on the
// first line, then procJiffies as "pid<TAB>jiffies<TAB>command" lines.
func serveCPU(t *testing.T) {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", cpuPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%d\n", busyJiffies())
			fmt.Fprintf(&b, "drives\t%d\t\n", driveRequests())
			hr, hs := headRequests()
			fmt.Fprintf(&b, "heads\t%d\t%d\n", hr, hs)
			for pid, p := range procJiffies() {
				fmt.Fprintf(&b, "%d\t%d\t%s\n", pid, p.jiffies, p.comm)
			}
			io.WriteString(c, b.String())
			c.Close()
		}
	}()
}

// driveRequests is the read and write requests completed by this guest's
// member disks, the virtio disks of memberBytes (/sys/block/X/stat fields
// 1 and 5): what the drives see after every merge above them.
func driveRequests() uint64 {
	var n uint64
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		dir := filepath.Join("/sys/block", e.Name())
		if !strings.HasPrefix(e.Name(), "vd") || readTrim(filepath.Join(dir, "size")) != strconv.Itoa(memberBytes/512) {
			continue
		}
		f := strings.Fields(readTrim(filepath.Join(dir, "stat")))
		if len(f) < 5 {
			continue
		}
		r, _ := strconv.ParseUint(f[0], 10, 64)
		w, _ := strconv.ParseUint(f[4], 10, 64)
		n += r + w
	}
	return n
}

// headRequests is the write requests completed by this guest's ublk and
// md devices and their sectors (/sys/block/X/stat fields 5 and 7): the
// requests each system under test received from its NVMe head.
func headRequests() (reqs, sectors uint64) {
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "ublkb") && !strings.HasPrefix(e.Name(), "md") {
			continue
		}
		f := strings.Fields(readTrim(filepath.Join("/sys/block", e.Name(), "stat")))
		if len(f) < 7 {
			continue
		}
		r, _ := strconv.ParseUint(f[4], 10, 64)
		s, _ := strconv.ParseUint(f[6], 10, 64)
		reqs, sectors = reqs+r, sectors+s
	}
	return reqs, sectors
}

// proc is one process's command name and user + system jiffies (all its
// threads, /proc/PID/stat fields 14-15).
type proc struct {
	comm    string
	jiffies uint64
}

// procJiffies returns this guest's live processes by PID. Interrupts and
// softirqs count to the task they interrupted; time in the idle task and
// in processes that exited is not in it.
func procJiffies() map[int]proc {
	out := map[int]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:]) // f[0] is field 3 (state)
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseUint(f[11], 10, 64)
		stime, _ := strconv.ParseUint(f[12], 10, 64)
		out[pid] = proc{comm: s[open+1 : end], jiffies: utime + stime}
	}
	return out
}

// self is this guest's name (benchGuest sets it).
var self string

// cpuSample is one guest's counters at one time.
type cpuSample struct {
	busy        uint64
	drives      uint64 // driveRequests
	headWrites  uint64 // headRequests
	headSectors uint64
	procs       map[int]proc
}

// sampleCPU reads the counters of the guest at addr (cpuPort).
func sampleCPU(t *testing.T, node, addr string) cpuSample {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(cpuPort)), 10*time.Second)
	if err != nil {
		t.Fatalf("CPU counters of %s: %v", node, err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	c.Close()
	first, rest, _ := strings.Cut(string(b), "\n")
	v, perr := strconv.ParseUint(strings.TrimSpace(first), 10, 64)
	if err != nil || perr != nil {
		t.Fatalf("CPU counters of %s: %v %v %q", node, err, perr, first)
	}
	out := cpuSample{busy: v, procs: map[int]proc{}}
	for _, line := range strings.Split(rest, "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 {
			continue
		}
		switch f[0] {
		case "drives":
			out.drives, _ = strconv.ParseUint(f[1], 10, 64)
			continue
		case "heads":
			out.headWrites, _ = strconv.ParseUint(f[1], 10, 64)
			out.headSectors, _ = strconv.ParseUint(f[2], 10, 64)
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		j, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			out.procs[pid] = proc{comm: f[2], jiffies: j}
		}
	}
	return out
}

// cpuNow samples the busy jiffies of this guest and of nodes.
func cpuNow(t *testing.T, nodes map[string]string) map[string]uint64 {
	out := map[string]uint64{self: busyJiffies()}
	for n, addr := range nodes {
		out[n] = sampleCPU(t, n, addr).busy
	}
	return out
}

// ioCounts is what drivesNow sums over the guests.
type ioCounts struct{ drives, headWrites, headSectors uint64 }

func (c ioCounts) minus(o ioCounts) ioCounts {
	return ioCounts{c.drives - o.drives, c.headWrites - o.headWrites, c.headSectors - o.headSectors}
}

// drivesNow is the member disk requests, and the writes the systems under
// test received, of this guest and of nodes so far.
func drivesNow(t *testing.T, nodes map[string]string) ioCounts {
	hr, hs := headRequests()
	c := ioCounts{driveRequests(), hr, hs}
	for node, addr := range nodes {
		s := sampleCPU(t, node, addr)
		c.drives, c.headWrites, c.headSectors = c.drives+s.drives, c.headWrites+s.headWrites, c.headSectors+s.headSectors
	}
	return c
}

// topProcs samples every guest (this one and nodes) around fn and
// returns, per guest, the k commands that used the most CPU during it
// and the busy time no live process accounts for.
func topProcs(t *testing.T, nodes map[string]string, k int, fn func()) map[string]string {
	all := map[string]string{self: "127.0.0.1"}
	for n, a := range nodes {
		all[n] = a
	}
	before := map[string]cpuSample{}
	for n, a := range all {
		before[n] = sampleCPU(t, n, a)
	}
	fn()
	out := map[string]string{}
	for n, a := range all {
		after := sampleCPU(t, n, a)
		type use struct {
			comm string
			j    uint64
		}
		// By PID (a kworker's name changes with its work), then summed
		// by name with a kworker's work queue cut off.
		byComm := map[string]uint64{}
		var sum uint64
		for pid, p := range after.procs {
			d := p.jiffies - min(p.jiffies, before[n].procs[pid].jiffies)
			comm := p.comm
			if strings.HasPrefix(comm, "kworker/") {
				comm = "kworker"
			}
			byComm[comm] += d
			sum += d
		}
		var uses []use
		for comm, j := range byComm {
			if j > 0 {
				uses = append(uses, use{comm, j})
			}
		}
		sort.Slice(uses, func(i, j int) bool { return uses[i].j > uses[j].j })
		var b strings.Builder
		for i, u := range uses {
			if i == k {
				break
			}
			fmt.Fprintf(&b, "%s %.2f, ", u.comm, float64(u.j)/userHZ)
		}
		busy := after.busy - before[n].busy
		fmt.Fprintf(&b, "busy %.2f, not in a live process %.2f", float64(busy)/userHZ, float64(busy-min(busy, sum))/userHZ)
		out[n] = b.String()
	}
	return out
}

// cpuWindow runs fn and returns the busy CPU seconds of each guest during it.
func cpuWindow(t *testing.T, nodes map[string]string, fn func()) map[string]float64 {
	c0 := cpuNow(t, nodes)
	fn()
	return cpuSince(t, nodes, c0)
}

// cpuSince returns the busy CPU seconds of each guest since sample c0.
func cpuSince(t *testing.T, nodes map[string]string, c0 map[string]uint64) map[string]float64 {
	c1 := cpuNow(t, nodes)
	out := map[string]float64{}
	for n := range c0 {
		out[n] = float64(c1[n]-c0[n]) / userHZ
	}
	return out
}

// sectors is the sectors read plus written of block device dev
// (/sys/block/X/stat fields 3 and 7).
func sectors(dev string) uint64 {
	r, w := sectorsRW(dev)
	return r + w
}

// sectorsRW is the sectors read and the sectors written of dev (0 for a
// device that is not there).
func sectorsRW(dev string) (r, w uint64) {
	f := strings.Fields(readTrim(filepath.Join("/sys/block", filepath.Base(dev), "stat")))
	if len(f) < 7 {
		return 0, 0
	}
	r, _ = strconv.ParseUint(f[2], 10, 64)
	w, _ = strconv.ParseUint(f[6], 10, 64)
	return r, w
}

// fio runs j on dev (size bytes; slice j.slice of two) for seconds after
// the ramp, or once over the whole device when seconds is 0, and returns
// fio's figure, the CPU seconds of the three guests and the GiB that
// crossed dev in the same window (ramp included). A failed run is
// returned with err set.
func fio(t *testing.T, nodes map[string]string, j job, dev string, size int64, seconds int) sample {
	t.Helper()
	args := []string{"--output-format=json", "--group_reporting", "--direct=1", "--ioengine=libaio",
		"--rw=" + j.rw, "--bs=" + j.bs, "--iodepth=" + strconv.Itoa(j.depth), "--randrepeat=0", "--norandommap",
		"--name=" + j.name, "--filename=" + dev}
	if seconds > 0 {
		half := size / 2 / (1 << 20) * (1 << 20)
		args = append(args, "--time_based", fmt.Sprintf("--runtime=%d", seconds), fmt.Sprintf("--ramp_time=%d", rampSeconds),
			fmt.Sprintf("--offset=%d", int64(j.slice)*half), fmt.Sprintf("--size=%d", half))
	} else {
		args = append(args, fmt.Sprintf("--size=%d", size))
	}
	var out []byte
	var err error
	s0, d0, t0 := sectors(dev), drivesNow(t, nodes), time.Now()
	cpu := cpuWindow(t, nodes, func() { out, err = exec.Command(benchtools.Bin+"/fio", args...).Output() })
	s := sample{cpu: cpu, gib: float64(sectors(dev)-s0) * 512 / (1 << 30), secs: time.Since(t0).Seconds()}
	d := drivesNow(t, nodes).minus(d0)
	s.drives = float64(d.drives)
	if d.headWrites > 0 {
		s.headWriteKiB = float64(d.headSectors) / 2 / float64(d.headWrites)
	}
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		s.err = fmt.Sprintf("fio %s on %s: %v: %s", j.name, dev, err, bytes.TrimSpace(append(out, stderr...)))
		return s
	}
	var res struct {
		Jobs []struct {
			Read, Write struct {
				BW   float64 `json:"bw"` // KiB/s
				IOPS float64 `json:"iops"`
			}
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		s.err = fmt.Sprintf("fio %s on %s: output: %v", j.name, dev, err)
		return s
	}
	st := res.Jobs[0].Read
	if strings.Contains(j.rw, "write") {
		st = res.Jobs[0].Write
	}
	s.v = st.BW / 1024
	if j.unit == "IOPS" {
		s.v = st.IOPS
	}
	return s
}

func devSize(t *testing.T, dev string) int64 {
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The reference's NVMe names: its own NQN prefix and port id, which
// fabraid's reconcilers (nqn.2026-11.io.fabraid:*, ports 18000..18199)
// leave alone.
const benchPrefix = "nqn.2026-12.io.fabraid.bench:"

var benchOwn = nvmet.Ownership{SubsystemPrefix: benchPrefix, MinPort: 1, MaxPort: 1}

func subsysNQN(node, name string) string { return benchPrefix + node + "-" + name }

// benchID is a node's host identity for the reference's connections, with
// its DH-HMAC-CHAP secret (fabraid authenticates its connections the same
// way). A separate NQN from fabraid's: configfs keeps one key per host NQN.
type benchID struct{ NQN, ID, Secret string }

// benchIdentity makes this node's identity and publishes it to the others.
func benchIdentity(t *testing.T, g *vmtest.Env) benchID {
	u := make([]byte, 16)
	rand.Read(u)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	s, err := nvmf.GenerateSecret(32)
	if err != nil {
		t.Fatal(err)
	}
	id := benchID{NQN: benchPrefix + "host-" + g.Name,
		ID:     fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:]),
		Secret: s.Reveal()}
	b, _ := json.Marshal(id)
	if err := os.WriteFile(filepath.Join(g.Shared, "benchid-"+g.Name), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

func readIdentity(t *testing.T, g *vmtest.Env, node string) benchID {
	var id benchID
	b, err := os.ReadFile(filepath.Join(g.Shared, "benchid-"+node))
	if err != nil || json.Unmarshal(b, &id) != nil {
		t.Fatalf("identity of %s: %v %q", node, err, b)
	}
	return id
}

// export applies the reference's nvmet state on this node: each device as
// subsystem node-name (namespace 1), allowed to host only, on port 1.
func export(t *testing.T, g *vmtest.Env, host benchID, devs map[string]string) {
	t.Helper()
	spec := nvmet.Spec{Hosts: []nvmet.Host{{NQN: host.NQN, DHCHAPKey: host.Secret}},
		Ports: []nvmet.Port{{ID: 1, Transport: nvmet.TCP, Address: g.Addr(g.Name), ServiceID: mdService}}}
	for name, dev := range devs {
		nqn := subsysNQN(g.Name, name)
		spec.Subsystems = append(spec.Subsystems, nvmet.Subsystem{NQN: nqn, AllowedHosts: []string{host.NQN},
			Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: dev}}})
		spec.Ports[0].Subsystems = append(spec.Ports[0].Subsystems, nqn)
	}
	tg := &nvmet.Target{Root: nvmet.DefaultRoot, Own: benchOwn}
	if _, err := tg.Apply(spec); err != nil {
		t.Fatal(err)
	}
}

// exportDisks (on b and c) exports the md disks (the third and fourth)
// and md's spare drive (d2) to a.
func exportDisks(t *testing.T, g *vmtest.Env, a benchID) {
	export(t, g, a, map[string]string{"d0": g.Disks[2], "d1": g.Disks[3], "d2": g.Disks[diskMDSpare]})
}

// exportMD (on a) exports /dev/md0 to c, and the fabraid volume's ublk
// device as "fab" the same way (the queue rows: both consumer connections
// then have the same target and host settings).
func exportMD(t *testing.T, g *vmtest.Env, c benchID, ublk string) {
	export(t, g, c, map[string]string{"md0": "/dev/md0", "fab": ublk})
}

// importDisks (on a) connects to node's md disks names (d0, d1, d2) with
// the timeouts of a fabraid member connection and returns their block
// devices.
func importDisks(t *testing.T, g *vmtest.Env, id benchID, node string, names ...string) []string {
	tm, err := nvmf.Profile(nvmf.ProfileMember)
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, name := range names {
		devs = append(devs, connect(t, nvmf.Options{Transport: nvmf.TCP, Address: g.Addr(node), ServiceID: mdService,
			NQN: subsysNQN(node, name), HostNQN: id.NQN, HostID: id.ID, Timeouts: &tm, DHCHAPSecret: id.Secret}))
	}
	return devs
}

// mdCreate makes /dev/md0: RAID-6, 64 KiB chunk (fabraid's), no bitmap,
// assumed clean (as productbench), retrying while fabraidd's drive scan
// holds a device for a moment.
// mdCreate makes md0 with an internal write-intent bitmap (mdadm's
// default for arrays of 100 GiB and more, what a site's md has) of
// fabraid's granularity (mdBitmapChunk): every row compares two arrays that
// both set a bit before the first write to a region and clear it when the
// region goes idle.
func mdCreate(t *testing.T, devs []string) {
	args := append([]string{"--create", "/dev/md0", "--run", "--level=6", "--raid-devices=6", "--chunk=64",
		"--metadata=1.2", "--assume-clean", "--bitmap=internal", "--bitmap-chunk=" + mdBitmapChunk}, devs...)
	for i := 0; ; i++ {
		cmd := exec.Command(benchtools.Bin+"/mdadm", args...)
		cmd.Stdin = strings.NewReader("y\n")
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		if i == 50 || !(bytes.Contains(out, []byte("busy")) || bytes.Contains(out, []byte("open"))) {
			t.Fatalf("mdadm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		exec.Command(benchtools.Bin+"/mdadm", "--stop", "/dev/md0").Run()
		time.Sleep(200 * time.Millisecond)
	}
}

// directReader opens dev for O_DIRECT reads and returns it with a
// 1 MiB aligned buffer.
func directReader(t *testing.T, dev string) (*os.File, []byte) {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	return f, buf
}

// readLoop reads dev (1 MiB every 7 MiB, round and round) until the
// returned stop is called.
func readLoop(t *testing.T, dev string) (stop func()) {
	f, buf := directReader(t, dev)
	size := devSize(t, dev)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for off := int64(0); ; off = (off + 7<<20) % (size - 1<<20) {
			select {
			case <-quit:
				return
			default:
			}
			f.ReadAt(buf, off)
		}
	}()
	return func() {
		close(quit)
		<-done
		f.Close()
	}
}

// degradeMD (on a, b powered off) reads md0 until md has failed b's two
// members on the I/O errors of their lost paths (fast_io_fail 0, as
// fabraid's member connections), as a site's md would; after 60 s it
// fails the rest with mdadm --fail.
func degradeMD(t *testing.T, start time.Time, bDevs []string) {
	f, buf := directReader(t, "/dev/md0")
	defer f.Close()
	size := devSize(t, "/dev/md0") - 1<<20
	t0 := time.Now()
	for off := int64(0); readTrim("/sys/block/md0/md/degraded") != "2"; off = (off + 7<<20) % size {
		if time.Since(t0) > 60*time.Second {
			for _, d := range bDevs {
				exec.Command(benchtools.Bin+"/mdadm", "/dev/md0", "--fail", d).Run()
			}
			logf(t, start, "md0: b's members failed by mdadm --fail after 60 s")
			break
		}
		f.ReadAt(buf, off)
	}
	logf(t, start, "md0 degraded after %.1f s: %s", time.Since(t0).Seconds(), readTrim("/proc/mdstat"))
}

// profileSeconds is the length of the engine CPU profiles; the fio run
// they profile lasts profileSlack seconds longer, for the signals'
// latency.
const (
	profileSeconds = 6
	profileSlack   = 12
)

// profileEngine (on the owner) takes a CPU profile of volume uuid's engine
// over its socket while c runs job once more (c signals once its fio is
// under way), into the shared directory.
func profileEngine(t *testing.T, g *vmtest.Env, uuid, job string) {
	g.Wait(t, "c", "profile-"+job)
	if err := benchtools.EngineProfile(uuid, profileSeconds, filepath.Join(g.Shared, "owner-engine-"+job+".pprof")); err != nil {
		t.Errorf("profile of %s: %v", job, err)
	}
	g.Signal(t, "profiled-"+job)
}

// tcgConf is the cluster timing of the VM tests (internal/cluster's
// tcgClusterConf): TCG guests go seconds without CPU.
const tcgConf = "owner_lease_ttl = 15\netcd_heartbeat_ms = 200\netcd_election_ms = 2000\n"

// startFabraidd starts fabraidd (log in /tmp/fabraidd.log, printed when
// the benchmark fails) and claims the given disks.
func startFabraidd(t *testing.T, g *vmtest.Env, claim []string) {
	conf := "node_name = " + g.Name + "\ncluster_address = " + g.Addr(g.Name) + "\nengine_mode = process\nmetrics_address =\n" + tcgConf
	if z := os.Getenv("FABRAID_CLUSTERBENCH_ZEROCOPY"); z != "" {
		conf += "ublk_zero_copy = " + z + "\n"
	}
	os.MkdirAll("/etc/fabraid", 0o755)
	if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create("/tmp/fabraidd.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/fabraidd")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile("/tmp/fabraidd.log")
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("fabraidd log (end):\n%s", b)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
		}
	})
	for range 600 {
		if exec.Command("/usr/bin/fabraid", "volume", "list").Run() == nil {
			for _, d := range claim {
				fab(t, "drive", "claim", d)
			}
			return
		}
		select {
		case err := <-done:
			t.Fatalf("fabraidd exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("fabraidd: no API after 60 s")
}

// fab runs the fabraid CLI. Reads that failed only on a slow etcd read (a
// CPU-starved TCG guest) are repeated for up to 90 s.
func fab(t *testing.T, args ...string) string {
	t.Helper()
	read := len(args) > 1 && (args[1] == "show" || args[1] == "list" || args[1] == "status")
	for deadline := time.Now().Add(90 * time.Second); ; {
		out, err := exec.Command("/usr/bin/fabraid", args...).CombinedOutput()
		if err == nil {
			return strings.TrimSpace(string(out))
		}
		if !read || !etcdSlow(string(out)) || time.Now().After(deadline) {
			t.Fatalf("fabraid %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		time.Sleep(2 * time.Second)
	}
}

func etcdSlow(out string) bool {
	return strings.Contains(out, "context deadline exceeded") || strings.Contains(out, "request timed out")
}

// formCluster: init on a, join b then c with tokens passed through the
// shared directory.
func formCluster(t *testing.T, g *vmtest.Env, start time.Time) {
	tok := func(n string) string { return filepath.Join(g.Shared, "token-"+n) }
	switch g.Name {
	case "a":
		fab(t, "cluster", "init", "--name", "bench")
		for _, n := range []string{"b", "c"} {
			if err := os.WriteFile(tok(n), []byte(fab(t, "cluster", "token", "--ttl", "10m")), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		g.Signal(t, "init")
	default:
		prev := map[string]string{"b": "a", "c": "b"}[g.Name]
		g.Wait(t, prev, map[string]string{"b": "init", "c": "joined"}[g.Name])
		fab(t, "cluster", "join", g.Addr("a"), "--token-file", tok(g.Name))
		g.Signal(t, "joined")
	}
	logf(t, start, "%s in the cluster", g.Name)
}

// benchJournal is the stripe journal the benchmark's volume gets: what
// a member of 1 GiB or more gets by default (its 64 MiB members would
// get ~1 MiB).
const benchJournal = 8 << 20

// createVolume creates v (4+2, a journal of benchJournal) and returns its
// JSON. A create that failed on an etcd deadline is repeated; if the
// first one had committed, the volume is awaited optimal instead.
func createVolume(t *testing.T) string {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := exec.Command("/usr/bin/fabraid", "volume", "create", "v", "--data", "4", "--parity", "2",
			"--journal", fmt.Sprintf("%dM", benchJournal>>20), "--json").CombinedOutput()
		switch {
		case err == nil:
			return strings.TrimSpace(string(out))
		case bytes.Contains(out, []byte("exists")):
			return string(waitVolume(t, time.Now(), func(in api.Volume) bool { return in.State == "optimal" }))
		case !etcdSlow(string(out)) || time.Now().After(deadline):
			t.Fatalf("volume create: %v\n%s", err, out)
		}
		time.Sleep(2 * time.Second)
	}
}

// waitVolume polls "volume show v" (up to 3 min) until ok, logging
// changes of state, and returns the last JSON.
func waitVolume(t *testing.T, start time.Time, ok func(api.Volume) bool) []byte {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	last := ""
	for {
		b, err := exec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
		var in api.Volume
		if err == nil && json.Unmarshal(b, &in) == nil {
			if now := in.State + " " + in.Device + " " + in.Error; now != last {
				logf(t, start, "volume v: %s", now)
				last = now
			}
			if ok(in) {
				return b
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume v: still %q after 3 min (%v)", last, err)
		}
		time.Sleep(time.Second)
	}
}

// logPlanned (on the owner) logs how many of the engine's writes the ublk
// queue thread carried as planned rounds, and why the others were not.
func logPlanned(t *testing.T, start time.Time, when string) {
	var in api.Volume
	b, err := exec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
	if err == nil {
		err = json.Unmarshal(b, &in)
	}
	if err != nil || in.IO == nil {
		logf(t, start, "volume v %s: no engine I/O counters on this node (%v)", when, err)
		return
	}
	logf(t, start, "volume v %s: %d writes, planned writes %+v", when, in.IO.Write.Requests, in.IO.PlannedWrites)
}

// waitHead (on a non-owner) waits until the volume is optimal and this
// node has its consumer device, and returns the device.
func waitHead(t *testing.T, start time.Time) string {
	var in api.Volume
	json.Unmarshal(waitVolume(t, start, func(in api.Volume) bool { return in.Device != "" && in.State == "optimal" }), &in)
	return in.Device
}

// logEngine (on the owner) logs the engine's "serving" line, which says
// whether its ublk device reads zero copy (zero_copy=true).
func logEngine(t *testing.T, start time.Time, uuid string) {
	b, err := os.ReadFile("/run/fabraid/engine-" + uuid + ".log")
	if err != nil {
		logf(t, start, "engine log: %v", err)
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "serving") {
			logf(t, start, "engine: %s", l)
		}
	}
}

// logKernelReports logs the kernel's UBSAN, BUG and WARNING reports of
// this boot (7.2.13 reports one in io_uring/rsrc.c at the first zero-copy
// reads; docs/performance.md).
func logKernelReports(t *testing.T, start time.Time) {
	// A raw non-blocking descriptor: os.File would wait in the poller
	// for the next record instead of returning EAGAIN at the end.
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		logf(t, start, "kernel reports: %v", err)
		return
	}
	defer unix.Close(fd)
	n := 0
	buf := make([]byte, 8192)
	for {
		k, err := unix.Read(fd, buf)
		if err == unix.EPIPE { // overwritten records: read on
			continue
		}
		if err != nil || k <= 0 {
			break
		}
		l := string(buf[:k])
		if strings.Contains(l, "UBSAN") || strings.Contains(l, "BUG") || strings.Contains(l, "WARNING") {
			logf(t, start, "kernel report: %s", strings.TrimSpace(l))
			n++
		}
	}
	logf(t, start, "kernel reports (UBSAN, BUG, WARNING) this boot: %d", n)
}

// checkJournal logs the journal and layout lines of "volume show v" and
// fails unless the volume got at least benchJournal.
func checkJournal(t *testing.T, start time.Time, in api.Volume) {
	out, err := exec.Command("/usr/bin/fabraid", "volume", "show", "v").CombinedOutput()
	if err != nil {
		t.Fatalf("volume show v: %v\n%s", err, out)
	}
	for l := range strings.Lines(string(out)) {
		if strings.HasPrefix(l, "journal:") || strings.HasPrefix(l, "layout:") || strings.Contains(l, "owner-domain journaling") {
			logf(t, start, "volume v %s", strings.TrimSpace(l))
		}
	}
	if !in.Journal || in.JournalBytes < benchJournal {
		t.Fatalf("volume v: journal %v of %d bytes, want at least %d", in.Journal, in.JournalBytes, benchJournal)
	}
}
