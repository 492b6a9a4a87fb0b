//go:build linux

package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// The shutdown-order phase of TestIntegrationUdevRules (issue 29): after
// the udev checks, guest a puts ext4 on vol0's NVMe head, mounts it
// through /etc/fstab with _netdev (systemd's own fstab generator makes
// the mount unit), starts a consumer of the file system that writes and
// fsyncs while it stops (an application flushing at shutdown), leaves 1
// MiB of dirty data in the page cache and reboots cleanly (systemctl
// reboot). Boot 2 reads boot 1's console: the consumer finished, ext4 was
// unmounted, and only then the engine's stop began (a drop-in prints the
// mount table at the engine's ExecStop); no I/O error, ext4 or jbd2
// complaint after the reboot began. Then, with no command typed, vol0 is
// assembled clean: no "unclean stop" in the engine's journal, no resync
// in volume show; the file system mounts through fstab without journal
// recovery and every file reads back.

const (
	rebootConf    = "node_name = a\nmetrics_address = 127.0.0.1:9436\nstate_dir = /mnt/host/a-state\n"
	rebootMount   = "/mnt/data"
	rebootMark    = "/usr/local/sbin/fabraid-vmtest-mark"
	rebootMarker  = "fabraid-vmtest-order:"
	rebootImage   = "/vmtest/ext4.img.gz"
	rebootFileLen = 1 << 20
)

// rebootFiles are the guest files of the shutdown-order phase: the
// fabraid.conf (state_dir on the share, so that claims and volume records
// survive the reboot like /var/lib/fabraid on a root disk), /etc/fstab,
// a generator that runs systemd's fstab generator (the vmtest guests mask
// all generators by name), the consumer unit, the engine drop-in that
// prints the mount table when the engine's stop begins and ends, and an
// ext4 image made on the host (the guest has no mkfs).
func rebootFiles(t *testing.T) map[string]string {
	if vmtest.InGuest() || !vmtest.Enabled() {
		return map[string]string{}
	}
	dir := t.TempDir()
	files := map[string]string{}
	add := func(guest, name, content string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		files[guest] = p
	}
	add("/etc/fabraid/fabraid.conf", "fabraid.conf", rebootConf, 0o644)
	add("/etc/fstab", "fstab", "/dev/fabraid/vol0 "+rebootMount+" ext4 _netdev,x-systemd.device-timeout=5min 0 0\n", 0o644)
	add("/etc/systemd/system-generators/fabraid-vmtest-fstab", "fstab-generator",
		"#!/bin/sh\nexec /usr/lib/systemd/system-generators/systemd-fstab-generator \"$@\"\n", 0o755)
	add(rebootMark, "mark", `#!/bin/sh
# Prints a shutdown-order marker on the console: what, uptime, whether
# the _netdev file system is mounted.
m=no
grep -q ' `+rebootMount+` ' /proc/self/mounts && m=yes
read up _ </proc/uptime
echo "`+rebootMarker+` $* uptime=$up data-mounted=$m" >/dev/console
`, 0o755)
	add("/usr/local/sbin/fabraid-vmtest-consumer-stop", "consumer-stop", `#!/bin/sh
# A consumer flushing at its stop: 8 x 256 KiB, each fsynced.
`+rebootMark+` consumer-stop-begin
i=0
while [ $i -lt 8 ]; do
	dd if=/dev/zero of=`+rebootMount+`/at-stop bs=256k count=1 seek=$i conv=notrunc,fsync 2>/dev/null || { `+rebootMark+` consumer-write-failed $i; exit 1; }
	i=$((i + 1))
done
echo done >`+rebootMount+`/consumer-stopped && sync
`+rebootMark+` consumer-stop-end
`, 0o755)
	add("/etc/systemd/system/fabraid-vmtest-consumer.service", "consumer.service", `[Unit]
Description=fabraid vmtest: a consumer of the _netdev file system that writes while it stops
RequiresMountsFor=`+rebootMount+`

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=`+rebootMark+` consumer-start
ExecStop=/usr/local/sbin/fabraid-vmtest-consumer-stop
TimeoutStopSec=120
`, 0o644)
	add("/etc/systemd/system/fabraid-engine@.service.d/fabraid-vmtest-order.conf", "engine-order.conf", `[Service]
ExecStop=+`+rebootMark+` engine-stop %i
ExecStopPost=+`+rebootMark+` engine-stopped %i
`, 0o644)
	files[rebootImage] = ext4Image(t, dir)
	return files
}

// ext4Image makes a 24 MiB ext4 file system with the host's mkfs.ext4
// (4 KiB blocks: the head's logical block size; every table initialised,
// so the guest's kernel starts no lazy init) and returns it gzipped.
func ext4Image(t *testing.T, dir string) string {
	img := filepath.Join(dir, "ext4.img")
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "fabraid-data",
		"-b", "4096", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", img, "24M").CombinedOutput()
	if err != nil {
		t.Fatalf("mkfs.ext4 (e2fsprogs) on the host: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write(raw)
	zw.Close()
	gz := img + ".gz"
	if err := os.WriteFile(gz, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return gz
}

// rebootData is the file written before the reboot, left dirty in the
// page cache for the unmount to write.
func rebootData() []byte {
	data := make([]byte, rebootFileLen)
	rng := rand.New(rand.NewPCG(29, 1))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	return data
}

// rebootPrepare is boot 1's part: ext4 through fstab on the head, the
// consumer started, dirty data, and a clean reboot. It does not return.
func rebootPrepare(t *testing.T, g *vmtest.Env, head string) {
	up, _ := os.ReadFile("/proc/uptime")
	t.Logf("shutdown-order phase starts at uptime %s s", strings.Fields(string(up))[0])
	zr, err := os.Open(rebootImage)
	if err != nil {
		t.Fatal(err)
	}
	z, err := gzip.NewReader(zr)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := os.OpenFile("/dev/fabraid/vol0", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dev, z); err != nil {
		t.Fatalf("ext4 image onto the head: %v", err)
	}
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	zr.Close()
	guestMust(t, "udevadm", "settle", "--timeout=60")
	// systemd loaded the mount from /etc/fstab (its fstab generator) as
	// a remote one.
	unit := guestMust(t, "systemctl", "show", "-p", "SourcePath", "-p", "After", "-p", "Requires", "mnt-data.mount")
	for _, want := range []string{"SourcePath=/etc/fstab", "remote-fs-pre.target", "dev-fabraid-vol0.device"} {
		if !strings.Contains(unit, want) {
			t.Errorf("mnt-data.mount: no %s:\n%s", want, unit)
		}
	}
	guestMust(t, "systemctl", "start", "remote-fs.target")
	rebootMounted(t, head)
	if err := os.WriteFile(rebootMount+"/before-reboot", rebootData(), 0o644); err != nil {
		t.Fatal(err)
	}
	guestMust(t, "systemctl", "start", "fabraid-vmtest-consumer.service")
	// Kernel messages of level info and above on the console for the
	// shutdown: ext4 says when it unmounts.
	if err := os.WriteFile("/proc/sys/kernel/printk", []byte("7"), 0o644); err != nil {
		t.Fatal(err)
	}
	if failed := guestMust(t, "systemctl", "--failed", "--no-legend"); strings.TrimSpace(failed) != "" {
		t.Errorf("failed units before the reboot:\n%s", failed)
	}
	if t.Failed() {
		t.FailNow()
	}
	g.Reboot(t)
}

// rebootMounted checks that the fstab mount is ext4 on the head.
func rebootMounted(t *testing.T, head string) {
	t.Helper()
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[1] == rebootMount {
			if f[0] != head || f[2] != "ext4" {
				t.Fatalf("%s: %s %s, want ext4 on %s", rebootMount, f[2], f[0], head)
			}
			return
		}
	}
	t.Fatalf("%s not mounted:\n%s", rebootMount, mounts)
}

// rebootCheck is boot 2's part.
func rebootCheck(t *testing.T, g *vmtest.Env) {
	t0 := time.Now()
	checkShutdownConsole(t, g.BootConsole(t, 1))
	var head string
	for i := 0; head == ""; i++ {
		if i == 900 {
			guestRun(t, "journalctl", "-b", "-u", "fabraidd", "--no-pager", "-n", "40")
			t.Fatal("no /dev/fabraid/vol0 180 s into the second boot")
		}
		head, _ = filepath.EvalSymlinks("/dev/fabraid/vol0")
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("boot 2: /dev/fabraid/vol0 -> %s %.1f s after the payload started", head, time.Since(t0).Seconds())
	// What multi-user.target does at boot: the _netdev mounts of fstab.
	guestMust(t, "systemctl", "start", "remote-fs.target")
	rebootMounted(t, head)
	got, err := os.ReadFile(rebootMount + "/before-reboot")
	if err != nil || !bytes.Equal(got, rebootData()) {
		t.Errorf("%s/before-reboot (dirty at the reboot) does not read back: %d bytes, %v", rebootMount, len(got), err)
	}
	if b, err := os.ReadFile(rebootMount + "/consumer-stopped"); err != nil || string(b) != "done\n" {
		t.Errorf("the consumer's last write at its stop: %q, %v", b, err)
	}
	if st, err := os.Stat(rebootMount + "/at-stop"); err != nil {
		t.Errorf("the consumer's writes at its stop: %v", err)
	} else if st.Size() != 8<<18 {
		t.Errorf("the consumer's writes at its stop: %d bytes, want %d", st.Size(), 8<<18)
	}
	// The engine stopped cleanly: assembly found nothing to resync.
	in := pollVolume(t, "vol0", "optimal", func(in api.Volume) bool { return in.State == "optimal" })
	b, _ := json.Marshal(in)
	t.Logf("boot 2: volume show vol0: %s", b)
	if in.Failed != 0 || in.Stale != 0 || in.Rebuild != nil || in.Progress != nil || in.Device != head {
		t.Errorf("vol0 after the clean reboot: failed %d, stale %d, rebuild %+v, progress %+v, device %s",
			in.Failed, in.Stale, in.Rebuild, in.Progress, in.Device)
	}
	for _, m := range in.Members {
		if m.Resync || m.Role != "active" {
			t.Errorf("vol0 member %d after the clean reboot: %+v", m.Slot, m)
		}
	}
	elog := guestMust(t, "journalctl", "-b", "-o", "cat", "--no-pager", "-u", "fabraid-engine@vol0.service")
	if !strings.Contains(elog, "engine serving") {
		t.Errorf("engine journal of boot 2 has no \"engine serving\":\n%s", elog)
	}
	for _, bad := range []string{"unclean stop", "resyncing", "write hole"} {
		if strings.Contains(elog, bad) {
			t.Errorf("engine journal of boot 2 says %q: the engine did not stop cleanly at the reboot:\n%s", bad, elog)
		}
	}
	// ext4 was unmounted cleanly: no journal recovery, no complaint.
	dmesg := guestMust(t, "dmesg")
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "EXT4-fs") && (strings.Contains(l, "recovery") || strings.Contains(l, "error") ||
			strings.Contains(l, "warning") || strings.Contains(l, "orphan")) {
			t.Errorf("boot 2 kernel log: %s", l)
		}
	}
	if failed := guestMust(t, "systemctl", "--failed", "--no-legend"); strings.TrimSpace(failed) != "" {
		t.Errorf("failed units:\n%s", failed)
	}
	t.Logf("boot 2: checks done %.1f s after the payload started", time.Since(t0).Seconds())
}

// checkShutdownConsole checks boot 1's console from the reboot on: the
// consumer stopped, ext4 unmounted, then the engine's stop began with the
// file system no longer mounted and ended; no I/O error or file system
// complaint anywhere in between; the kernel restarted the machine.
func checkShutdownConsole(t *testing.T, console string) {
	t.Helper()
	lines := strings.Split(console, "\n")
	start := -1
	for i, l := range lines {
		if strings.Contains(l, "vmtest: clean reboot of boot 1") {
			start = i
		}
	}
	if start < 0 {
		t.Fatalf("boot 1's console has no reboot line:\n%s", console)
	}
	find := func(what ...string) (int, string) {
		for i := start; i < len(lines); i++ {
			all := true
			for _, w := range what {
				all = all && strings.Contains(lines[i], w)
			}
			if all {
				return i, lines[i]
			}
		}
		return -1, ""
	}
	var shown []string
	for i := start; i < len(lines); i++ {
		l := lines[i]
		if strings.Contains(l, rebootMarker) || strings.Contains(l, "EXT4-fs") || strings.Contains(l, "reboot:") ||
			strings.Contains(l, "rror") || strings.Contains(l, "ailed") || strings.Contains(l, "JBD2") {
			shown = append(shown, l)
		}
		for _, bad := range []string{"I/O error", "EXT4-fs error", "EXT4-fs warning", "Aborting journal",
			"Detected IO errors", "lost async page write", "consumer-write-failed", "Failed unmounting mnt-data"} {
			if strings.Contains(l, bad) {
				t.Errorf("boot 1 shutdown: %s", l)
			}
		}
	}
	t.Logf("boot 1 shutdown, from the console:\n%s", strings.Join(shown, "\n"))
	consumerEnd, _ := find(rebootMarker, "consumer-stop-end", "data-mounted=yes")
	umount, umountLine := find("EXT4-fs (", "unmounting filesystem")
	engineStop, stopLine := find(rebootMarker, "engine-stop vol0")
	engineStopped, _ := find(rebootMarker, "engine-stopped vol0")
	restart, restartLine := find("reboot: Restarting system")
	if consumerEnd < 0 {
		t.Error("boot 1 shutdown: the consumer did not finish its writes at its stop")
	}
	if umount < 0 {
		t.Error("boot 1 shutdown: ext4 did not report unmounting the file system")
	}
	if engineStop < 0 || engineStopped < 0 {
		t.Error("boot 1 shutdown: no engine-stop/engine-stopped marker (the engine unit was not stopped?)")
	} else if !strings.Contains(stopLine, "data-mounted=no") {
		t.Errorf("boot 1 shutdown: the engine's stop began with %s still mounted: %s", rebootMount, stopLine)
	}
	if !(consumerEnd >= 0 && consumerEnd < umount && umount < engineStop && engineStop < engineStopped) {
		t.Errorf("boot 1 shutdown order: consumer done at console line %d, ext4 unmount %d, engine stop %d..%d; "+
			"want them in this order", consumerEnd, umount, engineStop, engineStopped)
	} else {
		t.Logf("boot 1 shutdown: consumer stop %s..%s s, ext4 unmounted %s s, engine stop %s..%s s, restart %s s (uptime)",
			markUptime(lines[find1(lines, start, "consumer-stop-begin")]), markUptime(lines[consumerEnd]),
			kernelTime(umountLine), markUptime(stopLine), markUptime(lines[engineStopped]), kernelTime(restartLine))
	}
	if restart < 0 {
		t.Error("boot 1 did not end in the kernel's restart")
	}
}

// find1 is the index of the first line from start that contains what
// (start when none does).
func find1(lines []string, start int, what string) int {
	for i := start; i < len(lines); i++ {
		if strings.Contains(lines[i], what) {
			return i
		}
	}
	return start
}

// markUptime is the uptime= value of a marker line.
func markUptime(l string) string {
	_, v, _ := strings.Cut(l, "uptime=")
	v, _, _ = strings.Cut(v, " ")
	return v
}

// kernelTime is the [ seconds] stamp of a kernel console line.
func kernelTime(l string) string {
	_, v, _ := strings.Cut(l, "[")
	v, _, _ = strings.Cut(v, "]")
	return strings.TrimSpace(v)
}
