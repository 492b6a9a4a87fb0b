package vmtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Systemd guests: /init prepares the guest as usual and then execs
// systemd as PID 1 (not in initrd mode), which starts vmtest.target:
// basic.target (journald, the dbus socket, ...) plus dbus.service and
// vmtest-payload.service, which runs the payload exactly as /init does in
// plain guests ("/init vmtest-payload").

// systemdModules are loaded in systemd guests as well: systemd sets up
// automount support at start and complains without it.
var systemdModules = []string{"autofs4"}

// systemdTarget is the unit systemd boots (default.target points at it).
const systemdTarget = `[Unit]
Description=vmtest guest
Requires=basic.target
Wants=dbus.service vmtest-payload.service
After=basic.target
AllowIsolate=yes
`

// payloadService runs the test payload once dbus and journald are up. Its
// output goes to the serial console, where the host reads the verdict; if
// it ends without having reported one (killed), ExecStopPost reports a
// failure so the guest does not sit until the host's timeout.
const payloadService = `[Unit]
Description=vmtest payload
Wants=dbus.service
After=basic.target dbus.service systemd-journald.service

[Service]
Type=simple
ExecStart=/init vmtest-payload
ExecStopPost=/init vmtest-payload-died
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/console
`

// systemdMasked are units that cannot work in a guest without udev, a
// disk root or /etc/fstab, or that only slow the boot down under TCG. They
// are masked (linked to /dev/null) in /etc/systemd/system.
var systemdMasked = []string{
	// Done by /init or not applicable to an initramfs root.
	"sys-kernel-config.mount", "sys-kernel-debug.mount", "sys-kernel-tracing.mount",
	"sys-fs-fuse-connections.mount", "dev-hugepages.mount", "proc-sys-fs-binfmt_misc.automount",
	"systemd-modules-load.service", "kmod-static-nodes.service", "systemd-remount-fs.service",
	"systemd-binfmt.service", "systemd-tmpfiles-setup-dev.service",
	// Slow under TCG and not needed by the tests (0.3-0.8 s each): sysctl
	// defaults, POSIX message queues, flushing a journal that stays in /run.
	"systemd-sysctl.service", "dev-mqueue.mount", "systemd-journal-flush.service",
	// First-boot and update machinery (ldconfig is not in the guest).
	"ldconfig.service", "systemd-firstboot.service", "systemd-machine-id-commit.service",
	"systemd-sysusers.service", "systemd-journal-catalog-update.service", "systemd-update-done.service",
	"systemd-hwdb-update.service", "systemd-repart.service", "systemd-random-seed.service",
	"systemd-update-utmp.service", "systemd-pcrphase.service", "systemd-pcrphase-sysinit.service",
	"systemd-boot-system-token.service",
	// Consoles and logins: the serial console belongs to the test.
	"getty.target", "getty@.service", "serial-getty@.service", "console-getty.service",
	"systemd-ask-password-console.path", "systemd-ask-password-wall.path",
	// Audit messages would flood the journal; initctl is for SysV tools.
	"systemd-journald-audit.socket", "systemd-initctl.socket",
}

// journaldConf forwards journal entries of warning and above (systemd's
// own included, which it logs to the journal once journald runs) to the
// serial console, so they are in the test log.
const journaldConf = `[Journal]
ForwardToConsole=yes
TTYPath=/dev/console
MaxLevelConsole=warning
`

// systemdPasswd and systemdGroup are the accounts systemd, journald,
// tmpfiles and dbus look up (Debian's base-passwd plus the system users of
// the systemd and dbus packages).
const systemdPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
sys:x:3:3:sys:/dev:/usr/sbin/nologin
messagebus:x:100:101::/nonexistent:/usr/sbin/nologin
systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin
systemd-timesync:x:997:997:systemd Time Synchronization:/:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
`

const systemdGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:15:
dialout:x:20:
cdrom:x:24:
audio:x:29:
utmp:x:43:
video:x:44:
plugdev:x:46:
staff:x:50:
users:x:100:
messagebus:x:101:
systemd-journal:x:999:
systemd-network:x:998:
systemd-timesync:x:997:
input:x:996:
kvm:x:995:
tape:x:26:
render:x:994:
sgx:x:993:
nogroup:x:65534:
`

const systemdOSRelease = `PRETTY_NAME="fabraid vmtest guest (Debian 12 systemd and dbus)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
VARIANT_ID=fabraid-vmtest
`

// writeSystemdRoot adds the cached systemd tree and the guest's systemd
// configuration to the initramfs. It must come before anything else so
// that bin, sbin, lib and lib64 are symlinks into /usr.
func writeSystemdRoot(c *cpioWriter, root *sysRoot, guest string) error {
	if err := copyTree(c, root.Dir); err != nil {
		return fmt.Errorf("vmtest: systemd guest tree %s: %w", root.Dir, err)
	}
	id := make([]byte, 16)
	rand.Read(id)
	c.File("etc/machine-id", 0o444, []byte(hex.EncodeToString(id)+"\n"))
	c.File("etc/hostname", 0o644, []byte(guest+"\n"))
	c.File("etc/os-release", 0o644, []byte(systemdOSRelease))
	c.File("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files\n"))
	c.Symlink("etc/mtab", "../proc/self/mounts")
	c.File("etc/systemd/system/vmtest.target", 0o644, []byte(systemdTarget))
	c.File("etc/systemd/system/vmtest-payload.service", 0o644, []byte(payloadService))
	c.Symlink("etc/systemd/system/default.target", "vmtest.target")
	c.File("etc/systemd/journald.conf.d/vmtest.conf", 0o644, []byte(journaldConf))
	for _, u := range systemdMasked {
		c.Symlink("etc/systemd/system/"+u, "/dev/null")
	}
	gens, _ := os.ReadDir(filepath.Join(root.Dir, "usr/lib/systemd/system-generators"))
	for _, g := range gens {
		c.Symlink("etc/systemd/system-generators/"+g.Name(), "/dev/null")
	}
	for _, d := range []string{"var/lib/systemd", "var/lib/dbus", "var/log", "var/tmp", "var/cache", "root"} {
		c.Dir(d)
	}
	return nil
}

// copyTree adds every file, directory and symlink under dir to the
// archive, in lexical order (so top-level symlinks precede the tree).
func copyTree(c *cpioWriter, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			c.Dir(rel)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.Symlink(rel, target)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			c.File(rel, uint32(info.Mode().Perm()), b)
		}
		return nil
	})
}

// guestFileMode is the mode of a GuestConfig.Files entry: configuration
// and unit files (under /etc/, the systemd and udev library directories,
// /usr/lib/tmpfiles.d and /usr/lib/modules-load.d) are 0644, so systemd and
// udevd do not warn about executable unit or rules files, unless the host
// file is executable (a generator or helper script); everything else
// 0755 as before.
func guestFileMode(guestPath string, hostMode fs.FileMode) uint32 {
	p := "/" + strings.TrimPrefix(guestPath, "/")
	config := false
	for _, dir := range []string{"/etc/", "/usr/lib/systemd/", "/lib/systemd/", "/usr/lib/udev/", "/lib/udev/",
		"/usr/lib/tmpfiles.d/", "/usr/lib/modules-load.d/"} {
		config = config || strings.HasPrefix(p, dir)
	}
	if config && hostMode&0o111 == 0 {
		return 0o644
	}
	return 0o755
}
