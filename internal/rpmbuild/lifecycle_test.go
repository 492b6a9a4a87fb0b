package rpmbuild

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// stubRoot prepares a scratch rpm root in which the scriptlets really run
// (rpm chroots into it): a static busybox as /bin/sh, and stand-ins for
// systemd-update-helper, systemctl and udevadm that log their arguments to
// /calls.log. /run/systemd/system exists, as on a booted node.
func stubRoot(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox (scripts/setup-host.sh installs busybox-static)")
	}
	if os.Getuid() != 0 {
		t.Skip("rpm runs scriptlets in a chroot: needs root")
	}
	root := scratchRoot(t)
	for _, d := range []string{"bin", "usr/bin", "usr/lib/systemd", "run/systemd/system", "var/tmp", "tmp", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), body, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(root, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	stub := "#!/bin/sh\necho \"$(basename $0) $*\" >> /calls.log\n"
	for _, p := range []string{"usr/lib/systemd/systemd-update-helper", "usr/bin/systemctl", "usr/bin/udevadm"} {
		if err := os.WriteFile(filepath.Join(root, p), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// calls returns and clears what the stand-ins logged.
func calls(t *testing.T, root string) string {
	t.Helper()
	p := filepath.Join(root, "calls.log")
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	os.Remove(p)
	return string(b)
}

func rpmRoot(t *testing.T, root string, args ...string) (stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command("rpm", append([]string{"--root", root}, args...)...)
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("rpm %s: %v\n%s%s", strings.Join(args, " "), err, o.String(), e.String())
	}
	return o.String(), e.String()
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestInstallUpgradeErase installs the el9 x86_64 package into a scratch
// root with its scriptlets, runs the installed fabraid, upgrades to a
// newer build with an edited fabraid.conf, and erases it.
func TestInstallUpgradeErase(t *testing.T) {
	f := getFixture(t)
	root := stubRoot(t)
	const unit = "fabraidd.service"

	// With udev rules shipped, %posttrans replays the block devices
	// through them after every install and upgrade.
	udev := ""
	if f.def.UdevRules {
		udev = "udevadm control --reload\nudevadm trigger --subsystem-match=block --tag-match=fabraid --action=change\n"
	}

	// Install: preset on first install, nothing else.
	rpmRoot(t, root, "-i", "--nodeps", f.pkgs["el9/x86_64"])
	if c := calls(t, root); c != "systemd-update-helper install-system-units "+unit+"\n"+udev {
		t.Errorf("install: scriptlets called %q, want only the preset of %s (and the udev replay)", c, unit)
	}
	if m := mode(t, filepath.Join(root, "etc/fabraid/fabraid.conf")); m != 0o640 {
		t.Errorf("fabraid.conf mode %o", m)
	}
	if m := mode(t, filepath.Join(root, "var/lib/fabraid")); m != 0o700 {
		t.Errorf("/var/lib/fabraid mode %o", m)
	}
	// The licenses (a duplicate is a link that resolves inside the
	// package) and fabraid.conf(5).
	for _, p := range []string{"usr/share/licenses/fabraid/LICENSE", "usr/share/man/man5/fabraid.conf.5.gz"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("install: %v", err)
		}
	}
	links := 0
	for _, fl := range f.def.Files {
		if strings.HasPrefix(fl.Dst, ModuleLicenseDir+"/") && fl.Kind != Dir {
			if b, err := os.ReadFile(filepath.Join(root, fl.Dst)); err != nil || len(b) == 0 {
				t.Errorf("install: module license %s: %v", fl.Dst, err)
			}
			if fl.Kind == Symlink {
				links++
			}
		}
	}
	if links == 0 {
		t.Error("no module license is a link to an identical one (expected for the Apache-2.0 texts)")
	}
	out, err := exec.Command(filepath.Join(root, "usr/bin/fabraid"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "fabraid "+f.opts.Version.Describe+" ") {
		t.Errorf("installed fabraid version: %v: %s (want %s)", err, out, f.opts.Version.Describe)
	}
	if out, err := exec.Command(filepath.Join(root, "usr/sbin/fabraidd"), "--help").CombinedOutput(); err != nil {
		t.Errorf("installed fabraidd --help: %v: %s", err, out)
	}

	// The administrator edits the configuration (1.0.1 changes the default) and fabraidd records a claim.
	conf := filepath.Join(root, "etc/fabraid/fabraid.conf")
	edited := []byte("# edited by the administrator\nnode_name = node07\n")
	if err := os.WriteFile(conf, edited, 0o640); err != nil {
		t.Fatal(err)
	}
	claim := filepath.Join(root, "var/lib/fabraid/drives/d1.json")
	if err := os.MkdirAll(filepath.Dir(claim), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(claim, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Upgrade: fabraidd marked for restart, engines not; no preset, no
	// disable (the old package's %preun sees $1 = 1).
	rpmRoot(t, root, "-U", "--nodeps", f.newer)
	if c := calls(t, root); c != "systemd-update-helper mark-restart-system-units "+unit+"\n"+udev {
		t.Errorf("upgrade: scriptlets called %q, want only a restart mark on %s (and the udev replay)", c, unit)
	}
	if v, _ := rpmRoot(t, root, "-q", "--qf", "%{VERSION}", "fabraid"); v != "1.0.1" {
		t.Errorf("after upgrade: version %q", v)
	}
	if b, _ := os.ReadFile(conf); !bytes.Equal(b, edited) {
		t.Errorf("upgrade replaced the edited fabraid.conf:\n%s", b)
	}
	if b, err := os.ReadFile(conf + ".rpmnew"); err != nil || !strings.Contains(string(b), "a new default in 1.0.1") {
		t.Errorf("the new default is not in fabraid.conf.rpmnew: %v %q", err, b)
	}

	// Erase: disable --now; the warning about running engines comes from
	// systemctl is-active (the stand-in says yes); the edited config is
	// kept as .rpmsave, the claim stays, everything else goes.
	_, stderr := rpmRoot(t, root, "-e", "fabraid")
	c := calls(t, root)
	if !strings.HasPrefix(c, "systemd-update-helper remove-system-units "+unit+"\n") ||
		!strings.Contains(c, "systemctl --quiet is-active fabraid-engine@*.service") {
		t.Errorf("erase: scriptlets called %q", c)
	}
	if !strings.Contains(stderr, "volume engines (fabraid-engine@*.service) keep running") {
		t.Errorf("erase: no warning about running engines: %q", stderr)
	}
	if b, err := os.ReadFile(conf + ".rpmsave"); err != nil || !bytes.Equal(b, edited) {
		t.Errorf("erase: edited config not saved as .rpmsave: %v %q", err, b)
	}
	if _, err := os.Stat(claim); err != nil {
		t.Errorf("erase removed the drive claim: %v", err)
	}
	for _, fl := range f.def.Files {
		if fl.Kind == Dir {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, fl.Dst)); err == nil {
			t.Errorf("erase left %s", fl.Dst)
		}
	}
}
