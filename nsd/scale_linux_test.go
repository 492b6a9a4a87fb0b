//go:build linux

package nsd_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// Guest paths of what packaging/scale installs, and of the Korn shell.
const (
	userExit    = "/var/mmfs/etc/nsddevices"
	preStartup  = "/usr/libexec/fabraid/fabraid-scale-prestartup"
	diskFailure = "/usr/libexec/fabraid/fabraid-scale-diskfailure"
	ksh         = "/bin/ksh93"
)

// TestIntegrationScale runs the Storage Scale contracts on a 6.12 guest
// with a fabraid volume behind its NVMe/TCP multipath head, through
// fabraidd and the fabraid CLI (Scale itself cannot run here): the
// installed nsddevices user exit sourced the way mmdevdiscover does (by
// busybox sh and by Debian's ksh93) and executed as a program, with no
// volume and with one, in merge and exclusive mode; fabraid nsd stanza read
// back by the IBM-grammar reader; fabraid wait and the preStartup callback
// timing out cleanly and blocking until the volume is up; the diskFailure
// callback logging fabraid's view of the NSD.
func TestIntegrationScale(t *testing.T) {
	disks := []vmtest.Disk{{Size: 32 << 20}, {Size: 32 << 20}, {Size: 32 << 20}}
	files := map[string]string{
		"/usr/bin/fabraid":  vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid"),
		"/usr/bin/fabraidd": vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd"),
		userExit:            hostPath(t, "../packaging/scale/nsddevices"),
		preStartup:          hostPath(t, "../packaging/scale/fabraid-scale-prestartup"),
		diskFailure:         hostPath(t, "../packaging/scale/fabraid-scale-diskfailure"),
	}
	for guest, host := range korn(t) {
		files[guest] = host
	}
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{Name: "a", Kernel: vmtest.Kernel612,
			Modules: []string{"ublk_drv", "nvmet_tcp", "nvme_tcp"}, Disks: disks, Files: files}},
		Timeout: 150 * time.Second,
	}, scaleGuest)
}

func hostPath(t *testing.T, rel string) string {
	if vmtest.InGuest() {
		return ""
	}
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// korn returns the guest files of Debian's ksh93 (package ksh93u+m, or
// ksh where that is the real package, fetched once into the VM test cache)
// and the host libraries its ELF header names (libc, libm and the loader on
// Debian 12).
func korn(t *testing.T) map[string]string {
	if vmtest.InGuest() || !vmtest.Enabled() {
		return nil
	}
	cache, err := vmtest.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "ksh93")
	bin := findKsh(dir)
	if bin == "" {
		var errs []string
		for _, pkg := range []string{"ksh93u+m", "ksh"} {
			if err := fetchDeb(cache, pkg, dir); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if bin = findKsh(dir); bin != "" {
				break
			}
			os.RemoveAll(dir) // a transitional package without the shell
		}
		if bin == "" {
			t.Fatalf("no ksh93 from apt: %s", strings.Join(errs, "; "))
		}
	}
	files := map[string]string{ksh: bin}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	interp := "/lib64/ld-linux-x86-64.so.2"
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	for _, lib := range append(libs, interp) {
		guest := lib
		if !filepath.IsAbs(lib) {
			guest = "/lib/x86_64-linux-gnu/" + lib
		}
		real, err := filepath.EvalSymlinks(guest)
		if err != nil {
			real, err = filepath.EvalSymlinks("/usr" + guest)
		}
		if err != nil {
			t.Fatalf("ksh93 needs %s, not on this host: %v", lib, err)
		}
		files[guest] = real
	}
	return files
}

func findKsh(dir string) string {
	for _, p := range []string{"bin/ksh93", "usr/bin/ksh93", "bin/ksh", "usr/bin/ksh"} {
		if st, err := os.Stat(filepath.Join(dir, p)); err == nil && st.Mode().IsRegular() {
			return filepath.Join(dir, p)
		}
	}
	return ""
}

// fetchDeb downloads pkg with apt-get download and unpacks it into dir
// (renamed into place, so parallel runs see all of it or nothing).
func fetchDeb(cache, pkg, dir string) error {
	os.MkdirAll(cache, 0o755)
	dl, err := os.MkdirTemp(cache, "download-"+pkg+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dl)
	cmd := exec.Command("apt-get", "download", pkg)
	cmd.Dir = dl
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %v: %s", pkg, err, bytes.TrimSpace(out))
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s: %d .deb files", pkg, len(debs))
	}
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], filepath.Join(dl, "x")).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %v: %s", debs[0], err, out)
	}
	if err := os.Rename(filepath.Join(dl, "x"), dir); err != nil && findKsh(dir) == "" {
		return err
	}
	return nil
}

type result struct {
	out, err string
	code     int
}

func sh(t *testing.T, env []string, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := result{out: o.String(), err: e.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Logf("%s %s: exit %d\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), r.code, r.out, r.err)
	return r
}

// mmdevdiscover imitates how mmdevdiscover takes the user exit: sourced,
// its return status kept; the lines it prints are the device list.
const mmdevdiscover = `nsddevices=/var/mmfs/etc/nsddevices
rc=none
if [ -f $nsddevices ]; then
  . $nsddevices
  rc=$?
fi
echo "NSDDEVICES_RC=$rc"
`

// mmdevdiscoverKsh does the same from inside a ksh function (a return in
// the dot script must leave the dot script, not the function).
const mmdevdiscoverKsh = `function discover {
  typeset nsddevices=/var/mmfs/etc/nsddevices
  . $nsddevices
  rc=$?
  print "NSDDEVICES_RC=$rc"
}
discover
`

// userExitRuns runs the installed user exit the four ways and returns the
// device lines of each, checking that every way returned want.
func userExitRuns(t *testing.T, want int) map[string][]string {
	t.Helper()
	os.WriteFile("/tmp/mmdevdiscover", []byte(mmdevdiscover), 0o755)
	os.WriteFile("/tmp/mmdevdiscover-ksh", []byte(mmdevdiscoverKsh), 0o755)
	runs := map[string]result{
		"sourced by sh":               sh(t, nil, "/bin/sh", "/tmp/mmdevdiscover"),
		"sourced by ksh93":            sh(t, nil, ksh, "/tmp/mmdevdiscover"),
		"sourced in a ksh93 function": sh(t, nil, ksh, "/tmp/mmdevdiscover-ksh"),
		"executed":                    sh(t, nil, userExit),
		"executed by ksh":             sh(t, nil, ksh, userExit),
	}
	lines := map[string][]string{}
	for how, r := range runs {
		out := r.out
		code := r.code
		if strings.HasPrefix(how, "sourced") {
			i := strings.LastIndex(out, "NSDDEVICES_RC=")
			if i < 0 || r.code != 0 {
				t.Fatalf("%s: the caller did not get control back (exit %d): %q", how, r.code, out)
			}
			fmt.Sscanf(out[i:], "NSDDEVICES_RC=%d", &code)
			out = out[:i]
		}
		if code != want {
			t.Errorf("%s: returned %d, want %d", how, code, want)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l != "" {
				lines[how] = append(lines[how], l)
			}
		}
	}
	return lines
}

func scaleGuest(t *testing.T, g *vmtest.Env) {
	t0 := time.Now()
	os.MkdirAll("/etc/fabraid", 0o755)
	writeConf := func(extra string) {
		conf := "node_name = a\nstate_dir = /var/lib/fabraid\napi_socket = /run/fabraid/api.sock\nmetrics_address =\n" + extra
		if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConf("")

	// No daemon yet: wait and the preStartup callback give up cleanly.
	if r := sh(t, nil, "/usr/bin/fabraid", "wait", "--timeout", "1s"); r.code != 5 || !strings.Contains(r.err, "fabraidd is not running") {
		t.Errorf("wait without a daemon: exit %d %q, want 5 naming the daemon", r.code, r.err)
	}
	tw := time.Now()
	r := sh(t, []string{"FABRAID_WAIT_TIMEOUT=1"}, preStartup, "preStartup", "a")
	if r.code != 1 || !strings.Contains(r.err, "volumes not up") || !strings.Contains(r.err, "timed out after") {
		t.Errorf("preStartup without a daemon: exit %d %q, want 1 and the reason", r.code, r.err)
	}
	t.Logf("preStartup timed out cleanly in %v (FABRAID_WAIT_TIMEOUT=1)", time.Since(tw))

	d := exec.Command("/usr/bin/fabraidd")
	d.Stdout, d.Stderr = os.Stderr, os.Stderr
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { d.Process.Signal(syscall.SIGTERM); d.Wait() }()
	if r := sh(t, nil, "/usr/bin/fabraid", "wait", "--timeout", "30s"); r.code != 0 {
		t.Fatalf("wait for a daemon with no volumes: exit %d", r.code)
	}

	// No volume: the user exit prints nothing, and returns 1 (merge).
	for how, l := range userExitRuns(t, 1) {
		if len(l) != 0 {
			t.Errorf("no volumes, %s: printed %q", how, l)
		}
	}

	// preStartup waiting for vol-0 blocks until it is up: started before
	// the volume exists, it cannot finish before the create.
	sh(t, nil, "/usr/bin/fabraid", append([]string{"drive", "claim"}, g.Disks...)...)
	cb := exec.Command(preStartup, "preStartup", "a")
	cb.Env = append(os.Environ(), "FABRAID_WAIT_VOLUMES=vol-0", "FABRAID_WAIT_TIMEOUT=120")
	var cbErr bytes.Buffer
	cb.Stderr = &cbErr
	if err := cb.Start(); err != nil {
		t.Fatal(err)
	}
	cbDone := make(chan error, 1)
	go func() { cbDone <- cb.Wait() }()
	tc := time.Now()
	out, err := exec.Command("/usr/bin/fabraid", "volume", "create", "vol-0", "--data", "2", "--parity", "1", "--json").Output()
	if err != nil {
		t.Fatalf("volume create: %v", err)
	}
	var in api.Volume
	if err := json.Unmarshal(out, &in); err != nil {
		t.Fatal(err)
	}
	t.Logf("volume create: %v, device %s", time.Since(tc), in.Device)
	if err := <-cbDone; err != nil {
		t.Errorf("preStartup waiting for vol-0: %v\n%s", err, cbErr.String())
	}
	head := strings.TrimPrefix(in.Device, "/dev/")
	if !strings.Contains(cbErr.String(), "volumes up: "+head+" generic") {
		t.Errorf("preStartup log: %q, want the head %s up", cbErr.String(), head)
	}
	t.Logf("preStartup returned %v after the create started", time.Since(tc))

	// One volume: the user exit prints its head, which exists, is a block
	// device and is in /proc/partitions; never a hidden path node.
	parts, _ := os.ReadFile("/proc/partitions")
	hidden, _ := filepath.Glob("/sys/block/nvme*c*n*")
	t.Logf("hidden path nodes: %v\n/proc/partitions:\n%s", hidden, parts)
	pathRE := regexp.MustCompile(`^nvme[0-9]+c[0-9]+n[0-9]+$`)
	if len(hidden) == 0 {
		t.Error("no hidden path node nvmeXcYnZ: the head is not a native multipath head")
	}
	for _, h := range hidden {
		if regexp.MustCompile(`(?m)\s` + filepath.Base(h) + `$`).Match(parts) {
			t.Errorf("hidden path node %s is in /proc/partitions", filepath.Base(h))
		}
	}
	check := func(mode string, want int) {
		for how, l := range userExitRuns(t, want) {
			if len(l) != 1 || l[0] != head+" generic" {
				t.Errorf("%s, %s: printed %q, want [%q]", mode, how, l, head+" generic")
				continue
			}
			for _, line := range l {
				f := strings.Fields(line)
				st, err := os.Stat("/dev/" + f[0])
				if err != nil || st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
					t.Errorf("%s: /dev/%s: %v, not a block device", how, f[0], err)
				}
				if !regexp.MustCompile(`(?m)\s` + f[0] + `$`).Match(parts) {
					t.Errorf("%s: %s is not in /proc/partitions", how, f[0])
				}
				if pathRE.MatchString(f[0]) || f[1] != "generic" {
					t.Errorf("%s: %q", how, line)
				}
			}
		}
	}
	check("merge", 1)
	writeConf("nsd_discovery = exclusive\n")
	check("exclusive", 0)
	writeConf("")

	// The stanza file reads back by IBM's grammar.
	r = sh(t, nil, "/usr/bin/fabraid", "nsd", "stanza")
	st, err := parseIBMStanzas(r.out)
	if err != nil || r.code != 0 || len(st) != 1 {
		t.Fatalf("nsd stanza: exit %d, %v, %d stanzas", r.code, err, len(st))
	}
	if err := checkIBMNSD(st[0]); err != nil || st[0].Clauses["device"] != in.Device || st[0].Clauses["nsd"] != "vol_0" {
		t.Errorf("stanza %v: %v", st[0].Clauses, err)
	}
	if _, ok := st[0].Clauses["servers"]; ok {
		t.Error("servers= written although every node sees the volume")
	}

	// fabraid wait: up, and a volume that never comes.
	if r := sh(t, nil, "/usr/bin/fabraid", "wait", "--volumes", "vol-0", "--timeout", "10s"); r.code != 0 {
		t.Errorf("wait for vol-0: exit %d", r.code)
	}
	if r := sh(t, nil, "/usr/bin/fabraid", "wait", "--volumes", "vol-0,nope", "--timeout", "1s"); r.code != 5 || !strings.Contains(r.err, "nope: no such volume") || strings.Contains(r.err, "vol-0:") {
		t.Errorf("wait for nope: exit %d %q", r.code, r.err)
	}

	// diskFailure with the documented parameters logs fabraid's view.
	r = sh(t, nil, diskFailure, "diskFailure", "a", "vol_0", "fs0")
	if r.code != 0 || !strings.Contains(r.err, "volume vol-0 ("+in.UUID+") state optimal device "+in.Device) {
		t.Errorf("diskFailure vol_0: exit %d %q", r.code, r.err)
	}
	if r := sh(t, nil, diskFailure, "diskFailure", "a", "other_nsd", "fs0"); r.code != 1 || !strings.Contains(r.err, "no fabraid volume on this node maps to it") {
		t.Errorf("diskFailure of a foreign NSD: exit %d %q", r.code, r.err)
	}
	t.Logf("guest part took %v", time.Since(t0))
}
