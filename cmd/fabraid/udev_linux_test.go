//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationUdevRules boots a 6.12 guest with Debian's systemd and
// systemd-udevd and packaging/udev/69-fabraid.rules (plus the systemd
// units) installed unchanged, 5 disks. After fabraidd creates a 2+1 volume on
// the first three: udevadm test on a member prints our variables; udev
// links /dev/disk/by-fabraid/member-<uuid> for each member, and
// /dev/disk/by-fabraid/<volume-uuid> and /dev/fabraid/vol0 on the NVMe head
// (not on a hidden path device); a disk with an ext4 signature and a blank
// disk get no FABRAID_* property, no link and no SYSTEMD_WANTS; two
// udevadm trigger rounds leave links, daemon and volume as they were. In
// udev's database (udevadm info) a member has ID_FS_TYPE=fabraid_member,
// ID_FS_USAGE=raid and the volume UUID; a loop device over a copy of a
// member's superblock area (which udev-probe itself calls a member) is not
// probed by the rules; udevd reports no syntax problem in our rules file;
// with fabraid.probe=0 (through SYSTEMD_PROC_CMDLINE) udevadm test runs no
// probe, with udev_probe = false the probe reports no member. Then the
// shutdown order at a clean reboot with ext4 mounted _netdev on the head
// (reboot_linux_test.go): unmounted before the engine stops, no I/O
// error, a clean volume at the next boot.
func TestIntegrationUdevRules(t *testing.T) {
	disks := make([]vmtest.Disk, 5)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 32 << 20}
	}
	files := udevGuestFiles(t)
	maps.Copy(files, rebootFiles(t))
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{{
		Name: "a", Kernel: vmtest.Kernel612, Systemd: true, Udev: true,
		Modules: []string{"ublk_drv", "nvmet_tcp", "nvme_tcp", "loop", "ext4", "crc32c_generic"}, Disks: disks, Files: files,
	}}, Timeout: 480 * time.Second}, udevGuest)
}

// udevGuestFiles are the binaries and packaging/ files (udev rules,
// systemd units, tmpfiles.d) installed unchanged in a udev guest.
func udevGuestFiles(t *testing.T) map[string]string {
	files := map[string]string{
		"/usr/bin/fabraid":   vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid"),
		"/usr/sbin/fabraidd": vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd"),
	}
	for guest, host := range map[string]string{
		"/usr/lib/udev/rules.d/69-fabraid.rules":          "udev/69-fabraid.rules",
		"/usr/lib/systemd/system/fabraidd.service":        "systemd/fabraidd.service",
		"/usr/lib/systemd/system/fabraid-engine@.service": "systemd/fabraid-engine@.service",
		"/usr/lib/tmpfiles.d/fabraid.conf":                "tmpfiles.d/fabraid.conf",
	} {
		p, err := filepath.Abs(filepath.Join("..", "..", "packaging", host))
		if err != nil {
			t.Fatal(err)
		}
		files[guest] = p
	}
	return files
}

func guestRun(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	t.Logf("%s %s: %v\n%s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	return string(out), err
}

func guestMust(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := guestRun(t, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

// byFabraid lists /dev/disk/by-fabraid and /dev/fabraid as name -> target.
func byFabraid(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range []string{"/dev/disk/by-fabraid", "/dev/fabraid"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			target, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Errorf("%s/%s: %v", dir, e.Name(), err)
			}
			out[filepath.Join(dir, e.Name())] = target
		}
	}
	return out
}

func udevGuest(t *testing.T, g *vmtest.Env) {
	if g.BootNum > 1 {
		rebootCheck(t, g)
		return
	}
	t0 := time.Now()
	guestMust(t, "udevadm", "settle", "--timeout=60")
	t.Logf("udev coldplug settled %v after payload start", time.Since(t0))
	members, ext4, blank := g.Disks[:3], g.Disks[3], g.Disks[4]
	// An ext4 superblock magic (0xEF53 at byte 1080).
	f, err := os.OpenFile(ext4, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x53, 0xef}, 1080); err != nil {
		t.Fatal(err)
	}
	f.Close()

	os.MkdirAll("/etc/fabraid", 0o755)
	if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte(rebootConf), 0o644); err != nil {
		t.Fatal(err)
	}
	guestMust(t, "systemctl", "daemon-reload")
	guestMust(t, "/usr/bin/fabraid", append([]string{"drive", "claim"}, members...)...)
	guestMust(t, "systemctl", "start", "fabraidd")
	var in api.Volume
	out := guestMust(t, "/usr/bin/fabraid", "volume", "create", "vol0", "--data", "2", "--parity", "1",
		"--drives", strings.Join(members, ","), "--json")
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(guestMust(t, "systemctl", "show", "-p", "MainPID", "--value", "fabraidd"))

	// udevadm test runs our IMPORT{program} on a member.
	testOut, err := exec.Command("udevadm", "test", "/sys/class/block/"+filepath.Base(members[0])).CombinedOutput()
	if err != nil {
		t.Fatalf("udevadm test: %v\n%s", err, testOut)
	}
	test := string(testOut)
	for _, want := range []string{"FABRAID_MEMBER=1", "FABRAID_VOLUME_UUID=" + in.UUID, "FABRAID_VOLUME_NAME=vol0",
		"FABRAID_SLOT=0", "FABRAID_DOMAIN=a", "SYSTEMD_WANTS=fabraidd.service", "ID_FS_TYPE=fabraid_member"} {
		if !strings.Contains(test, want) {
			t.Errorf("udevadm test %s: no %s", members[0], want)
		}
	}
	// systemd-udevd logs a rules line it cannot parse ("Invalid key/value
	// pair, ignoring") and goes on without it (udevadm test also logs every
	// rule it applies, "<dev>: ...rules:N Importing ...": not those).
	for _, l := range strings.Split(test, "\n") {
		if strings.Contains(l, "69-fabraid.rules:") &&
			(strings.Contains(l, "nvalid") || strings.Contains(l, "gnoring") || strings.Contains(l, "nknown") || strings.Contains(l, "rror")) {
			t.Errorf("udevd about our rules: %s", l)
		}
	}
	probeRun := "udev-probe " + members[0]
	if !strings.Contains(test, probeRun) {
		t.Errorf("udevadm test %s: the trace does not name %q", members[0], probeRun)
	}
	udevOptOuts(t, members[0], probeRun)
	loop := memberCopyOnLoop(t, members[0])

	var first map[string]string
	for round := 0; round < 2; round++ {
		devs := append([]string{in.Device, ext4, blank, loop}, members...)
		guestMust(t, "udevadm", append([]string{"trigger", "--action=change"}, devs...)...)
		if _, err := guestRun(t, "udevadm", "settle", "--timeout=90"); err != nil {
			guestRun(t, "journalctl", "-b", "-u", "systemd-udevd", "--no-pager", "-n", "50")
			guestRun(t, "ps", "aux")
			t.Fatalf("round %d: udev did not settle", round)
		}
		links := byFabraid(t)
		t.Logf("round %d links: %v", round, links)
		want := map[string]string{
			"/dev/disk/by-fabraid/" + in.UUID: in.Device,
			"/dev/fabraid/vol0":               in.Device,
		}
		for _, m := range members {
			want["/dev/disk/by-fabraid/member-"+memberUUID(t, m)] = m
		}
		for l, target := range want {
			if links[l] != target {
				t.Errorf("round %d: %s -> %q, want %q", round, l, links[l], target)
			}
		}
		if len(links) != len(want) {
			t.Errorf("round %d: %d links, want %d", round, len(links), len(want))
		}
		if round == 1 && !maps.Equal(first, links) {
			t.Errorf("second trigger changed the links: %v -> %v", first, links)
		}
		first = links
		for _, d := range []string{ext4, blank, loop} {
			props := guestMust(t, "udevadm", "info", "--query=property", d)
			if strings.Contains(props, "FABRAID_") || strings.Contains(props, "fabraid_member") || strings.Contains(props, "fabraidd") {
				t.Errorf("%s (not a member, or not a device the rules probe) got fabraid properties:\n%s", d, props)
			}
		}
		for _, m := range members {
			props := guestMust(t, "udevadm", "info", "--query=property", m)
			for _, want := range []string{"ID_FS_TYPE=fabraid_member", "ID_FS_USAGE=raid", "ID_FS_UUID=" + in.UUID,
				"ID_FS_UUID_SUB=" + memberUUID(t, m), "ID_FS_LABEL=vol0"} {
				if !strings.Contains(props, want+"\n") {
					t.Errorf("round %d: %s: no %s in udev's database", round, m, want)
				}
			}
		}
	}
	if got := strings.TrimSpace(guestMust(t, "systemctl", "show", "-p", "MainPID", "--value", "fabraidd")); got != pid {
		t.Errorf("fabraidd MainPID %s after the triggers, was %s", got, pid)
	}
	// Shutdown order: the engine stops after remote file systems and
	// Storage Scale (issue 29).
	before := guestMust(t, "systemctl", "show", "-p", "Before", "--value", "fabraid-engine@vol0.service")
	for _, u := range []string{"remote-fs-pre.target", "gpfs.service", "shutdown.target"} {
		if !strings.Contains(" "+strings.TrimSpace(before)+" ", " "+u+" ") {
			t.Errorf("fabraid-engine@vol0.service is not Before=%s: Before=%s", u, strings.TrimSpace(before))
		}
	}
	headNameConverges(t, in.Device)
	out = guestMust(t, "/usr/bin/fabraid", "volume", "show", "vol0", "--json")
	if err := json.Unmarshal([]byte(out), &in); err != nil || in.State != "optimal" {
		t.Errorf("volume after triggers: state %q (%v)", in.State, err)
	}
	if failed := guestMust(t, "systemctl", "--failed", "--no-legend"); strings.TrimSpace(failed) != "" {
		t.Errorf("failed units:\n%s", failed)
	}
	if t.Failed() {
		return
	}
	rebootPrepare(t, g, in.Device)
}

// headNameConverges: a change event on the head while fabraidd is stopped
// loses /dev/fabraid/vol0 (the rule cannot learn the name); once fabraidd
// serves again the link comes back without anyone triggering udev.
func headNameConverges(t *testing.T, head string) {
	guestMust(t, "systemctl", "stop", "fabraidd")
	guestMust(t, "udevadm", "trigger", "--action=change", head)
	guestRun(t, "udevadm", "settle", "--timeout=90")
	if l := byFabraid(t)["/dev/fabraid/vol0"]; l != "" {
		t.Errorf("fabraidd stopped: /dev/fabraid/vol0 -> %q after a change event, want no link", l)
	}
	guestMust(t, "systemctl", "start", "fabraidd")
	t0 := time.Now()
	for byFabraid(t)["/dev/fabraid/vol0"] != head {
		if time.Since(t0) > 2*time.Minute {
			guestRun(t, "journalctl", "-u", "fabraidd", "--no-pager", "-n", "30")
			t.Fatalf("/dev/fabraid/vol0 not back %v after fabraidd started", time.Since(t0))
		}
		time.Sleep(time.Second)
	}
	t.Logf("/dev/fabraid/vol0 back %.1f s after fabraidd started", time.Since(t0).Seconds())
}

// udevOptOuts runs udevadm test on member with each opt-out: fabraid.probe=0
// on the kernel command line (given through SYSTEMD_PROC_CMDLINE, systemd's
// stand-in for /proc/cmdline, which IMPORT{cmdline} reads) must keep the
// rules from running the probe at all; udev_probe = false in fabraid.conf
// must make the probe report no member.
func udevOptOuts(t *testing.T, member, probeRun string) {
	t.Helper()
	const confPath = "/etc/fabraid/fabraid.conf"
	conf, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(confPath, conf, 0o644)
	for _, c := range []struct {
		name, env, conf string
		probes          bool
	}{
		{"fabraid.probe=0", "SYSTEMD_PROC_CMDLINE=fabraid.probe=0", "", false},
		{"udev_probe = false", "", string(conf) + "udev_probe = false\n", true},
	} {
		if c.conf != "" {
			if err := os.WriteFile(confPath, []byte(c.conf), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("udevadm", "test", "/sys/class/block/"+filepath.Base(member))
		if c.env != "" {
			cmd.Env = append(os.Environ(), c.env)
		}
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil {
			t.Errorf("%s: udevadm test: %v\n%s", c.name, err, out)
		}
		if strings.Contains(out, probeRun) != c.probes {
			t.Errorf("%s: udevadm test ran %q: %v, want %v", c.name, probeRun, strings.Contains(out, probeRun), c.probes)
		}
		if strings.Contains(out, "FABRAID_MEMBER=1") || strings.Contains(out, "fabraid_member") {
			t.Errorf("%s: the member still got our properties:\n%s", c.name, out)
		}
		if c.conf != "" {
			os.WriteFile(confPath, conf, 0o644)
		}
	}
}

// memberCopyOnLoop attaches a loop device to a file holding a copy of the
// first MiB of member (its superblock area), checks that udev-probe itself
// reports that device a member, and returns it: the rules must not probe it
// (loop devices are no drives for the inventory).
func memberCopyOnLoop(t *testing.T, member string) string {
	t.Helper()
	buf := make([]byte, 1<<20)
	f, err := os.Open(member)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(buf, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "member-copy.img")
	if err := os.WriteFile(img, append(buf, make([]byte, 7<<20)...), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	const loopCtlGetFree, loopSetFD, loopClrFD = 0x4C82, 0x4C00, 0x4C01
	n, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ctl.Fd(), loopCtlGetFree, 0)
	if errno != 0 {
		t.Fatalf("LOOP_CTL_GET_FREE: %v", errno)
	}
	dev := fmt.Sprintf("/dev/loop%d", n)
	var l *os.File
	for i := 0; i < 50; i++ { // devtmpfs adds the node
		if l, err = os.OpenFile(dev, os.O_RDWR, 0); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, l.Fd(), loopSetFD, back.Fd()); errno != 0 {
		t.Fatalf("LOOP_SET_FD %s: %v", dev, errno)
	}
	t.Cleanup(func() {
		if l, err := os.OpenFile(dev, os.O_RDWR, 0); err == nil {
			syscall.Syscall(syscall.SYS_IOCTL, l.Fd(), loopClrFD, 0)
			l.Close()
		}
	})
	if out, err := exec.Command("/usr/bin/fabraid", "udev-probe", dev).Output(); err != nil || !strings.Contains(string(out), "FABRAID_MEMBER=1") {
		t.Fatalf("udev-probe %s (a member's copy): %v %q", dev, err, out)
	}
	return dev
}

// memberUUID is the member UUID udev-probe reads from dev.
func memberUUID(t *testing.T, dev string) string {
	t.Helper()
	out, err := exec.Command("/usr/bin/fabraid", "udev-probe", dev).Output()
	if err != nil {
		t.Fatalf("udev-probe %s: %v", dev, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "FABRAID_MEMBER_UUID="); ok {
			return v
		}
	}
	t.Fatalf("udev-probe %s: no member uuid in %q", dev, out)
	return ""
}
