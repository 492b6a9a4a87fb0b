//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/memberio"
)

// TestIntegrationBootAssembly is boot-time assembly in a 6.12 guest with
// Debian's systemd and systemd-udevd and packaging/ installed unchanged,
// 7 disks, assembly_timeout = 5. The guest prepares two volumes on its
// disks as an earlier boot would have left them (written through the
// engine, nothing running): vol0 2+2 on disks 0-3, vol1 2+1 on disks 4-6.
// Then disk 3 (vol0 slot 3) and disks 5, 6 (vol1 slots 1, 2) are pulled,
// and a udev change event on the remaining members pulls fabraidd in
// (SYSTEMD_WANTS; no fabraid command). Checked: right after the daemon is
// ready nothing runs, vol0 waits "for 1 of 4 members (slot 3, member U)"
// and vol1 "cannot start: 1 of 3 members present, 2 needed"; after the
// timer vol0 runs degraded, /dev/fabraid/vol0 appears and the data written
// before reads back, while vol1 still waits and "fabraid wait" names why;
// then disk 0 is pulled from the idle running vol0 and the udev remove
// rule fails slot 0 as missing at once (no I/O would have noticed).
func TestIntegrationBootAssembly(t *testing.T) {
	disks := make([]vmtest.Disk, 7)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 64 << 20}
	}
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{{
		Name: "a", Kernel: vmtest.Kernel612, Systemd: true, Udev: true,
		Modules: []string{"ublk_drv", "nvmet_tcp", "nvme_tcp"}, Disks: disks, Files: udevGuestFiles(t),
	}}, Timeout: 300 * time.Second}, bootGuest)
}

// bootVolume creates volume name on devs as "fabraid volume create" does
// (every member in domain "a") and writes 1 MiB of seeded data at offset
// 0 through the engine; nothing stays open.
func bootVolume(t *testing.T, name string, k, m int, devs []string, seed uint64) []byte {
	return bootVolumeRegion(t, name, k, m, devs, seed, 0)
}

// bootVolumeRegion is bootVolume with the bitmap region size (0: the
// engine's default).
func bootVolumeRegion(t *testing.T, name string, k, m int, devs []string, seed uint64, region int64) []byte {
	t.Helper()
	var ms []engine.Member
	domains := make([]string, len(devs))
	for i, d := range devs {
		mb, err := memberio.Open(d, memberio.Options{Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, mb)
		domains[i] = "a"
	}
	vol, err := engine.Create(engine.Config{Name: name, K: k, M: m, Domains: domains, AllowDomainViolation: true,
		RegionSize: region, CTime: time.Now().Unix()}, ms, devs, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if _, err := vol.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := vol.Close(); err != nil {
		t.Fatal(err)
	}
	return data
}

// showVolume is "fabraid volume show NAME --json".
func showVolume(t *testing.T, name string) api.Volume {
	t.Helper()
	out, err := exec.Command("/usr/bin/fabraid", "volume", "show", name, "--json").Output()
	var in api.Volume
	if err == nil {
		err = json.Unmarshal(out, &in)
	}
	if err != nil {
		t.Fatalf("volume show %s: %v %s", name, err, out)
	}
	return in
}

// pollVolume asks for volume name until ok or 90 s passed.
func pollVolume(t *testing.T, name, what string, ok func(api.Volume) bool) api.Volume {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		in := showVolume(t, name)
		if ok(in) {
			return in
		}
		if time.Now().After(deadline) {
			guestRun(t, "journalctl", "-b", "-u", "fabraidd", "--no-pager", "-n", "40")
			t.Fatalf("volume %s: not %s after 90 s: %+v", name, what, in)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readDirect reads n bytes at offset 0 of dev with O_DIRECT.
func readDirect(t *testing.T, dev string, n int) []byte {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := alignedBuf(n)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatalf("read %s: %v", dev, err)
	}
	return buf
}

// alignedBuf is n bytes at a 4 KiB-aligned address (O_DIRECT).
func alignedBuf(n int) []byte {
	raw := make([]byte, n+4096)
	off := int(uintptr(unsafe.Pointer(&raw[0])) & 4095)
	if off != 0 {
		off = 4096 - off
	}
	return raw[off : off+n]
}

// writeDirect writes p at offset 0 of dev with O_DIRECT (len(p) a
// multiple of 4 KiB).
func writeDirect(t *testing.T, dev string, p []byte) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := alignedBuf(len(p))
	copy(buf, p)
	if _, err := f.WriteAt(buf, 0); err != nil {
		t.Fatalf("write %s: %v", dev, err)
	}
}

// sectorsWritten is the kernel's count of 512-byte sectors written to
// block device dev (/sys/block/NAME/stat, field 7).
func sectorsWritten(t *testing.T, dev string) int64 {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/stat")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 7 {
		t.Fatalf("%s stat: %v %q", dev, err, b)
	}
	n, err := strconv.ParseInt(f[6], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func bootGuest(t *testing.T, g *vmtest.Env) {
	guestMust(t, "udevadm", "settle", "--timeout=60")
	os.MkdirAll("/etc/fabraid", 0o755)
	if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte("node_name = a\nassembly_timeout = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// While the volumes are prepared, udev's change events (its watch on
	// the disks) must not start the daemon.
	guestMust(t, "systemctl", "mask", "--runtime", "fabraidd")
	guestMust(t, "/usr/bin/fabraid", append([]string{"drive", "claim"}, g.Disks...)...)
	// 1 MiB bitmap regions: ~60 per member, so a resync of one is told
	// apart from a full rebuild.
	data0 := bootVolumeRegion(t, "vol0", 2, 2, g.Disks[0:4], 1, 1<<20)
	bootVolume(t, "vol1", 2, 1, g.Disks[4:7], 2)
	missing0 := memberUUID(t, g.Disks[3])
	present := []string{g.Disks[0], g.Disks[1], g.Disks[2], g.Disks[4]}
	for _, i := range []int{3, 5, 6} {
		g.RemoveDisk(t, i)
	}
	guestMust(t, "udevadm", "settle", "--timeout=60")
	guestMust(t, "systemctl", "unmask", "--runtime", "fabraidd")

	// The members "appear": udev pulls fabraidd in.
	t0 := time.Now()
	guestMust(t, "udevadm", append([]string{"trigger", "--action=change"}, present...)...)
	for i := 0; ; i++ {
		if st, _ := exec.Command("systemctl", "is-active", "fabraidd").Output(); strings.TrimSpace(string(st)) == "active" {
			break
		}
		if i == 300 {
			t.Errorf("fabraidd not pulled in by SYSTEMD_WANTS 60 s after a change event on the members; starting it")
			guestMust(t, "systemctl", "start", "fabraidd")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	ready := time.Since(t0)
	t.Logf("fabraidd active %v after the trigger", ready)

	// Nothing starts before the timer.
	in0, in1 := showVolume(t, "vol0"), showVolume(t, "vol1")
	want0 := "waiting for 1 of 4 members (slot 3, member " + missing0 + "); starts degraded in "
	if in0.State != "waiting" || !strings.Contains(in0.Error, want0) {
		t.Errorf("vol0 right after the daemon is ready: %s %q, want waiting %q", in0.State, in0.Error, want0)
	}
	want1 := "cannot start: 1 of 3 members present, 2 needed"
	if in1.State != "waiting" || !strings.Contains(in1.Error, want1) {
		t.Errorf("vol1: %s %q, want waiting %q", in1.State, in1.Error, want1)
	}
	if ublks, _ := filepath.Glob("/dev/ublkb*"); len(ublks) != 0 {
		t.Errorf("ublk devices before the timer: %v", ublks)
	}

	// After it vol0 runs degraded.
	in0 = pollVolume(t, "vol0", "degraded", func(in api.Volume) bool { return in.State != "waiting" })
	t.Logf("vol0 %s %v after the trigger", in0.State, time.Since(t0))
	if in0.State != "degraded" || in0.Failed != 1 || in0.Members[3].Failure != "missing" {
		t.Fatalf("vol0 after the timer: %+v", in0)
	}
	journal := guestMust(t, "journalctl", "-b", "-u", "fabraidd", "-o", "cat", "--no-pager")
	for _, w := range []string{"volume waits", "volume starts degraded (last resort)", want1} {
		if !strings.Contains(journal, w) {
			t.Errorf("fabraidd journal has no %q", w)
		}
	}
	if _, err := guestRun(t, "/usr/bin/fabraid", "wait", "--volumes", "vol0", "--timeout", "60s"); err != nil {
		t.Fatalf("fabraid wait vol0: %v", err)
	}
	in0 = showVolume(t, "vol0") // the consumer device is known now
	var head string
	for i := 0; i < 150 && head == ""; i++ {
		head, _ = filepath.EvalSymlinks("/dev/fabraid/vol0")
		time.Sleep(200 * time.Millisecond)
	}
	if head != in0.Device {
		t.Fatalf("/dev/fabraid/vol0 -> %q, want %s", head, in0.Device)
	}
	if got := readDirect(t, "/dev/fabraid/vol0", len(data0)); !bytes.Equal(got, data0) {
		t.Fatal("vol0 degraded: data written before does not read back")
	}

	// vol1 never starts, and says why.
	if in1 = showVolume(t, "vol1"); in1.State != "waiting" || !strings.Contains(in1.Error, want1) {
		t.Errorf("vol1 after the timer: %s %q, want waiting %q", in1.State, in1.Error, want1)
	}
	out, err := exec.Command("/usr/bin/fabraid", "wait", "--volumes", "vol1", "--timeout", "2s").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(string(out), want1) {
		t.Errorf("fabraid wait vol1: %v %s, want exit 5 naming %q", err, out, want1)
	}
	if out := guestMust(t, "/usr/bin/fabraid", "volume", "list"); !strings.Contains(out, "waiting") {
		t.Errorf("volume list does not show vol1 waiting:\n%s", out)
	}

	// Written while slot 3 is away, then its disk is plugged in: it is
	// re-added by itself with a resync of the region written meanwhile,
	// not rebuilt in full.
	copy(data0[:64<<10], bytes.Repeat([]byte{0x5a}, 64<<10))
	writeDirect(t, "/dev/fabraid/vol0", data0[:64<<10])
	dev3 := g.AddDisk(t, 3)
	w0 := sectorsWritten(t, dev3)
	pollVolume(t, "vol0", "optimal", func(in api.Volume) bool { return in.State == "optimal" && in.Failed == 0 })
	resynced := (sectorsWritten(t, dev3) - w0) * 512
	t.Logf("slot 3 plugged in as %s: back in sync, %d KiB written to it (its data area is ~60 MiB)", dev3, resynced>>10)
	if resynced > 8<<20 {
		t.Errorf("returning slot 3 got %d MiB written: a full rebuild, not a resync of the region written while it was away", resynced>>20)
	}
	if j := guestMust(t, "journalctl", "-b", "-u", "fabraidd", "-o", "cat", "--no-pager"); !strings.Contains(j, "re-adding it") {
		t.Error("fabraidd journal does not say it re-added the returning member")
	}
	if got := readDirect(t, "/dev/fabraid/vol0", len(data0)); !bytes.Equal(got, data0) {
		t.Fatal("vol0 after the resync: data does not read back")
	}

	// A member pulled from the idle running volume is failed as missing
	// by the udev remove rule, not left for an I/O error.
	t1 := time.Now()
	g.RemoveDisk(t, 0)
	in0 = pollVolume(t, "vol0", "without slot 0", func(in api.Volume) bool { return in.Members[0].Role == "failed" })
	t.Logf("slot 0 failed %v after its disk was pulled", time.Since(t1))
	if in0.Members[0].Failure != "missing" || in0.State != "degraded" {
		t.Errorf("vol0 after disk 0 was pulled: %+v", in0)
	}
	if got := readDirect(t, "/dev/fabraid/vol0", len(data0)); !bytes.Equal(got, data0) {
		t.Error("vol0 without slots 0 and 3: data does not read back")
	}
	g.AddDisk(t, 0)
	pollVolume(t, "vol0", "optimal again", func(in api.Volume) bool { return in.State == "optimal" && in.Failed == 0 })
	if failed := guestMust(t, "systemctl", "--failed", "--no-legend"); strings.TrimSpace(failed) != "" {
		t.Errorf("failed units:\n%s", failed)
	}
}

// TestIntegrationColdBoot is a power cut and a cold boot with every
// member present: guest a (6.12, systemd 252, Debian's systemd-udevd,
// packaging/ unchanged, state_dir on the 9p share so that the claims
// survive the reboot like /var/lib/fabraid on a root disk) creates vol0
// 2+1 and writes 1 MiB through /dev/fabraid/vol0; guest c cuts its power
// and boots it again with the same disks. In the new boot nobody types a
// command: udev's coldplug pulls fabraidd in, the volume is assembled,
// /dev/fabraid/vol0 appears and the data reads back.
func TestIntegrationColdBoot(t *testing.T) {
	disks := make([]vmtest.Disk, 3)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 64 << 20}
	}
	conf := filepath.Join(t.TempDir(), "fabraid.conf")
	if err := os.WriteFile(conf, []byte("node_name = a\nstate_dir = /mnt/host/a-state\nassembly_timeout = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := udevGuestFiles(t)
	files["/etc/fabraid/fabraid.conf"] = conf
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{
		{Name: "a", Kernel: vmtest.Kernel612, Systemd: true, Udev: true,
			Modules: []string{"ublk_drv", "nvmet_tcp", "nvme_tcp"}, Disks: disks, Files: files},
		{Name: "c", Kernel: vmtest.Kernel612},
	}, Timeout: 420 * time.Second}, coldBootGuest)
}

func coldBootGuest(t *testing.T, g *vmtest.Env) {
	if g.Name == "c" {
		g.Wait(t, "a", "written")
		g.Kill(t, "a")
		g.Boot(t, "a")
		return
	}
	data := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(3, 1))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if g.BootNum == 1 {
		guestMust(t, "udevadm", "settle", "--timeout=60")
		guestMust(t, "/usr/bin/fabraid", append([]string{"drive", "claim"}, g.Disks...)...)
		guestMust(t, "systemctl", "start", "fabraidd")
		guestMust(t, "/usr/bin/fabraid", "volume", "create", "vol0", "--data", "2", "--parity", "1",
			"--drives", strings.Join(g.Disks, ","))
		guestMust(t, "/usr/bin/fabraid", "wait", "--volumes", "vol0", "--timeout", "60s")
		guestMust(t, "udevadm", "settle", "--timeout=60")
		writeDirect(t, "/dev/fabraid/vol0", data)
		g.Signal(t, "written")
		time.Sleep(time.Hour) // until the power cut
	}
	t0 := time.Now()
	var head string
	for i := 0; head == ""; i++ {
		if i == 900 {
			guestRun(t, "journalctl", "-b", "-u", "fabraidd", "--no-pager", "-n", "40")
			t.Fatal("no /dev/fabraid/vol0 180 s into the second boot")
		}
		head, _ = filepath.EvalSymlinks("/dev/fabraid/vol0")
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("/dev/fabraid/vol0 -> %s %v after the payload started (boot %d)", head, time.Since(t0), g.BootNum)
	if got := readDirect(t, "/dev/fabraid/vol0", len(data)); !bytes.Equal(got, data) {
		t.Fatal("data written before the power cut does not read back")
	}
	in := pollVolume(t, "vol0", "optimal", func(in api.Volume) bool { return in.State == "optimal" })
	if in.Failed != 0 || in.Device != head {
		t.Errorf("vol0 after the cold boot: %+v", in)
	}
	if failed := guestMust(t, "systemctl", "--failed", "--no-legend"); strings.TrimSpace(failed) != "" {
		t.Errorf("failed units:\n%s", failed)
	}
}
