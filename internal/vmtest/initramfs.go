package vmtest

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"strings"
)

// Verdict codes written to the isa-debug-exit port (0xf4); qemu exits with
// (code<<1)|1, so a plain poweroff (0) or a kernel panic (0 with panic=-1)
// is never mistaken for a verdict.
const (
	codePass = 0x10 // qemu exit 33
	codeFail = 0x11 // qemu exit 35
	codeSkip = 0x12 // qemu exit 37
)

// markerPrefix starts the verdict line the guest prints on its console.
const markerPrefix = "FABRAID-VMTEST-VERDICT"

// initMarker is the first line /init prints: the kernel reached user
// space. Nothing of the test (modules, payload) runs before it.
const initMarker = "FABRAID-VMTEST-INIT"

// initScript is the guest's /init (busybox sh). It mounts the basics, loads
// modules in dependency order, configures the network and the 9p share,
// runs the payload and reports a verdict on the console and through the
// isa-debug-exit port. In systemd guests (VMTEST_SYSTEMD=1) it execs
// systemd after the preparation instead; systemd's vmtest-payload.service
// then runs "/init vmtest-payload", the same payload and verdict code, and
// "/init vmtest-payload-died" if that service ends without a verdict.
const initScript = `#!/bin/busybox sh
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root

verdict() {
	echo "` + markerPrefix + ` $VMTEST_NONCE $1 $2"
	case $1 in
	pass) code='\020' ;;
	skip) code='\022' ;;
	*) code='\021' ;;
	esac
	printf "$code" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
	sync
	poweroff -f
}

run_payload() {
	. /etc/vmtest/guest.conf
	cd /tmp
	rm -f /mnt/host/$FABRAID_VMTEST_GUEST.status
	"$@" </dev/null 2>&1
	rc=$?
	# A clean reboot (Env.Reboot) stops the payload: no verdict.
	[ -n "$VMTEST_SYSTEMD" ] && [ -e /run/vmtest-reboot ] && exit 0
	status=$(cat /mnt/host/$FABRAID_VMTEST_GUEST.status 2>/dev/null)
	if [ -n "$VMTEST_RAW" ]; then
		[ $rc -eq 0 ] && verdict pass "" || verdict fail "command exited $rc"
	fi
	case "$rc:$status" in
	0:pass*) verdict pass "" ;;
	0:skip*) verdict skip "" ;;
	0:) verdict fail "test binary exited 0 without running the guest function (is -test.run right?)" ;;
	*) verdict fail "test binary exited $rc" ;;
	esac
}

case "$1" in
vmtest-payload)
	run_payload
	;;
vmtest-payload-died)
	. /etc/vmtest/guest.conf
	[ -e /run/vmtest-reboot ] && exit 0
	verdict fail "vmtest-payload.service ended without a verdict ($SERVICE_RESULT, $EXIT_CODE $EXIT_STATUS)"
	;;
esac

echo "` + initMarker + `"
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /mnt/host /etc /usr/bin /sbin /usr/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /root
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
. /etc/vmtest/guest.conf

for m in $VMTEST_MODULES; do
	if ! out=$(insmod /lib/modules/vmtest/$m.ko 2>&1); then
		echo "vmtest: insmod $m: $out"
		verdict fail "module $m failed to load: $out"
	fi
done
if grep -q configfs /proc/filesystems; then
	mount -t configfs configfs /sys/kernel/config
fi
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host0 /mnt/host; then
	verdict fail "cannot mount the 9p host share (modules 9p, 9pnet_virtio)"
fi
ip link set lo up
if [ -n "$VMTEST_IP" ]; then
	ip addr add "$VMTEST_IP/16" dev eth0 && ip link set eth0 up || verdict fail "cannot configure eth0 with $VMTEST_IP"
fi
if [ -n "$VMTEST_SYSTEMD" ]; then
	read up _ </proc/uptime
	echo "vmtest: starting systemd at uptime ${up}s"
	exec /lib/systemd/systemd
	verdict fail "cannot exec /lib/systemd/systemd"
fi
run_payload
`

// baseModules are loaded in every guest: the virtio PCI transport (built in
// on 6.12, a module on 6.1), disks, NIC and the 9p share.
var baseModules = []string{"virtio_pci", "virtio_blk", "virtio_net", "9p", "9pnet_virtio"}

// guestImage is everything that goes into one guest's initramfs.
type guestImage struct {
	conf    map[string]string // exported into /etc/vmtest/guest.conf
	modules []loadedModule
	files   map[string]string // guest path -> host path
	args    []string          // payload argv
	systemd *sysRoot          // systemd and dbus tree for systemd guests; nil otherwise
	guest   string            // guest name (hostname of systemd guests)
}

// writeInitramfs writes the guest's initramfs. Uncompressed by default: the
// kernel unpacks it without a decompressor, which matters under TCG;
// FABRAID_VMTEST_GZIP=1 compresses it (smaller, slower to boot).
func writeInitramfs(path string, img guestImage) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	var c *cpioWriter
	var gz *gzip.Writer
	if os.Getenv("FABRAID_VMTEST_GZIP") == "1" {
		gz, _ = gzip.NewWriterLevel(bw, gzip.BestSpeed)
		c = newCPIOWriter(gz)
	} else {
		c = newCPIOWriter(bw)
	}
	if err := writeImage(c, img); err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("vmtest: write initramfs: %w", err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// writeImage writes the guest's files: for systemd guests the systemd tree
// first (its /bin, /lib, ... are symlinks into /usr), then busybox, /init,
// the modules, guest.conf and the test's files.
func writeImage(c *cpioWriter, img guestImage) error {
	gp := func(p string) string { return p }
	if img.systemd != nil {
		if err := writeSystemdRoot(c, img.systemd, img.guest); err != nil {
			return err
		}
		img.conf["VMTEST_SYSTEMD"] = "1"
		gp = usrMerge
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("vmtest: busybox: %w (apt-get install busybox-static)", err)
	}
	if err := requireStatic(busybox, "/bin/busybox"); err != nil {
		return err
	}
	c.File(gp("bin/busybox"), 0o755, busybox)
	c.Symlink(gp("bin/sh"), "busybox")
	c.File("init", 0o755, []byte(initScript))
	var names []string
	for _, m := range img.modules {
		c.File(gp("lib/modules/vmtest/"+m.Name+".ko"), 0o644, m.Object)
		names = append(names, m.Name)
	}
	img.conf["VMTEST_MODULES"] = strings.Join(names, " ")
	var conf strings.Builder
	for _, k := range sortedKeys(img.conf) {
		fmt.Fprintf(&conf, "export %s=%s\n", k, shellQuote(img.conf[k]))
	}
	conf.WriteString("set --")
	for _, a := range img.args {
		conf.WriteString(" " + shellQuote(a))
	}
	conf.WriteString("\n")
	c.File("etc/vmtest/guest.conf", 0o644, []byte(conf.String()))
	if img.systemd == nil {
		c.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
		c.File("etc/group", 0o644, []byte("root:x:0:\n"))
	} else {
		c.File("etc/passwd", 0o644, []byte(systemdPasswd))
		c.File("etc/group", 0o644, []byte(systemdGroup))
	}
	for _, p := range sortedKeys(img.files) {
		st, err := os.Stat(img.files[p])
		if err != nil {
			return fmt.Errorf("vmtest: guest file %s: %w", p, err)
		}
		b, err := os.ReadFile(img.files[p])
		if err != nil {
			return fmt.Errorf("vmtest: guest file %s: %w", p, err)
		}
		c.File(gp(strings.TrimPrefix(p, "/")), guestFileMode(p, st.Mode()), b)
	}
	return nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
