package vmtest

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseDepends(t *testing.T) {
	got := parseDepends("libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, perl:any, libsystemd-shared (= 252.39-1~deb12u2)")
	want := []string{"libc6", "debconf", "perl", "libsystemd-shared"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseDepends = %q, want %q", got, want)
	}
}

func TestParseAptShow(t *testing.T) {
	out := []byte(`Package: systemd
Version: 252.39-1~deb12u2
Depends: libacl1 (>= 2.2.23), mount
Pre-Depends: libc6 (>= 2.34)
Description: system and service manager
 continued description: not a field

Package: mount
Version: 2.38.1-5+deb12u3
`)
	got := parseAptShow(out)
	want := map[string]debPackage{
		"systemd": {Name: "systemd", Version: "252.39-1~deb12u2", Depends: []string{"libacl1", "mount", "libc6"}},
		"mount":   {Name: "mount", Version: "2.38.1-5+deb12u3"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseAptShow = %+v, want %+v", got, want)
	}
}

// fakeApt answers like apt-cache show from a fixed table.
func fakeApt(table map[string]debPackage) aptShow {
	return func(names []string) (map[string]debPackage, error) {
		out := map[string]debPackage{}
		for _, n := range names {
			if p, ok := table[n]; ok {
				out[n] = p
			}
		}
		return out, nil
	}
}

// The walk follows first alternatives, stops at the stop list (prefixes
// too), survives cycles and names an unknown package and who needs it.
func TestResolveClosure(t *testing.T) {
	table := map[string]debPackage{
		"systemd": {Name: "systemd", Version: "1", Depends: []string{"libc6", "perl-base", "mount"}},
		"mount":   {Name: "mount", Version: "2", Depends: []string{"libc6", "systemd"}},
		"libc6":   {Name: "libc6", Version: "3", Depends: []string{"debconf"}},
	}
	pkgs, err := resolveClosure([]string{"systemd"}, []string{"perl*", "debconf"}, fakeApt(table))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name+"="+p.Version)
	}
	if want := []string{"libc6=3", "mount=2", "systemd=1"}; !reflect.DeepEqual(names, want) {
		t.Errorf("closure %q, want %q", names, want)
	}
	table["mount"] = debPackage{Name: "mount", Version: "2", Depends: []string{"libgone1"}}
	_, err = resolveClosure([]string{"systemd"}, []string{"perl*", "debconf"}, fakeApt(table))
	if err == nil || !strings.Contains(err.Error(), "libgone1 (needed by mount)") {
		t.Errorf("unknown package: error %v, want it named with its dependent", err)
	}
	key1, _ := rootfsKey(pkgs)
	pkgs[0].Version = "3.1"
	if key2, _ := rootfsKey(pkgs); key1 == key2 {
		t.Error("rootfs key does not change with a package version")
	}
}

func TestUsrMergeLinks(t *testing.T) {
	for _, tc := range []struct{ rel, target, want string }{
		{"lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{"lib/x86_64-linux-gnu/libz.so.1", "libz.so.1.2.13", "libz.so.1.2.13"},
		{"bin/x", "../usr/lib/y", "../lib/y"},
		{"usr/bin/x", "../../lib/systemd/systemd", "../lib/systemd/systemd"},
		{"usr/sbin/halt", "/bin/systemctl", "/usr/bin/systemctl"},
		{"etc/x", "/etc/y", "/etc/y"},
	} {
		if got := mergedLinkTarget(tc.rel, tc.target); got != tc.want {
			t.Errorf("mergedLinkTarget(%s -> %s) = %s, want %s", tc.rel, tc.target, got, tc.want)
		}
	}
	if got := usrMerge("/sbin/mount.x"); got != "usr/sbin/mount.x" {
		t.Errorf("usrMerge = %s", got)
	}
	if !pruned("usr/share/doc/systemd/copyright") || pruned("usr/share/dbus-1/system.conf") {
		t.Error("prune list wrong")
	}
}

// copyHostFile copies a host file into the tree at a guest path.
func copyHostFile(t *testing.T, root, host, guest string) {
	t.Helper()
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, guest)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// The ELF check on a tree built from a host binary: without its libraries
// it names each missing one, the file and its package; with them (behind
// the usr-merge symlinks) it passes.
func TestCheckELFClosure(t *testing.T) {
	host, err := readELFInfo("/", "/usr/bin/true")
	if err != nil || host == nil || host.interp == "" || len(host.needed) == 0 {
		t.Skipf("host /usr/bin/true is not a dynamically linked ELF binary (%v)", err)
	}
	root := t.TempDir()
	for _, d := range usrMergedDirs {
		os.MkdirAll(filepath.Join(root, "usr", d), 0o755)
		if err := os.Symlink("usr/"+d, filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
	copyHostFile(t, root, "/usr/bin/true", "/usr/bin/true")
	os.WriteFile(filepath.Join(root, "usr/bin/script"), []byte("#!/bin/sh\n"), 0o755) // not ELF: ignored
	owners := map[string]string{"usr/bin/true": "coreutils"}
	err = checkELFClosure(root, owners)
	if err == nil {
		t.Fatal("tree without libraries passed the ELF check")
	}
	for _, want := range append([]string{"/usr/bin/true (package coreutils)", "interpreter " + host.interp}, host.needed...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q:\n%v", want, err)
		}
	}
	for _, lib := range host.needed {
		found, ok := findLib("/", lib, host.dirs)
		if !ok {
			t.Skipf("host library %s not found", lib)
		}
		copyHostFile(t, root, found, "/usr/lib/x86_64-linux-gnu/"+lib)
		if lib == "libc.so.6" {
			checkLibcDeps(t, found)
		}
	}
	interp, ok := resolveInRoot("/", host.interp, 0)
	if !ok {
		t.Skipf("host interpreter %s not found", host.interp)
	}
	copyHostFile(t, root, interp, "/usr/lib/x86_64-linux-gnu/"+filepath.Base(interp))
	if filepath.Dir(host.interp) != "/usr/lib/x86_64-linux-gnu" && filepath.Dir(host.interp) != "/lib/x86_64-linux-gnu" {
		os.MkdirAll(filepath.Join(root, filepath.Dir(host.interp)), 0o755)
		link := filepath.Join(root, host.interp)
		if err := os.Symlink("/usr/lib/x86_64-linux-gnu/"+filepath.Base(interp), link); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkELFClosure(root, owners); err != nil {
		t.Errorf("complete tree: %v", err)
	}
}

// checkLibcDeps skips the test when the host libc needs more than the
// loader (then the copied tree would be incomplete for reasons of the
// host, not of the check).
func checkLibcDeps(t *testing.T, libc string) {
	t.Helper()
	f, err := elf.Open(libc)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if !strings.HasPrefix(l, "ld-linux") {
			t.Skipf("host libc needs %s", l)
		}
	}
}

func TestGuestFileMode(t *testing.T) {
	for _, tc := range []struct {
		path string
		host os.FileMode
		want uint32
	}{
		{"/etc/systemd/system/x.service", 0o644, 0o644},
		{"/usr/lib/systemd/system/fabraidd.service", 0o664, 0o644},
		{"/lib/systemd/system/x.service", 0o644, 0o644},
		{"etc/fabraid/fabraid.conf", 0o600, 0o644},
		{"/usr/lib/systemd/system-generators/x", 0o755, 0o755},
		{"/usr/lib/udev/rules.d/69-fabraid.rules", 0o664, 0o644},
		{"/usr/lib/tmpfiles.d/fabraid.conf", 0o644, 0o644},
		{"/usr/bin/fabraid", 0o755, 0o755},
		{"/usr/bin/data", 0o644, 0o755},
	} {
		if got := guestFileMode(tc.path, tc.host); got != tc.want {
			t.Errorf("guestFileMode(%s, %v) = %o, want %o", tc.path, tc.host, got, tc.want)
		}
	}
}

// A systemd guest's image: the tree's top-level symlinks come first and
// nothing is written as a directory over them, busybox and test files
// land in /usr, unit files are 0644, the boot target and masks are there.
func TestWriteImageSystemd(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no /bin/busybox on this host (apt-get install busybox-static)")
	}
	tree := t.TempDir()
	for _, d := range usrMergedDirs {
		os.MkdirAll(filepath.Join(tree, "usr", d), 0o755)
		os.Symlink("usr/"+d, filepath.Join(tree, d))
	}
	os.MkdirAll(filepath.Join(tree, "usr/lib/systemd/system-generators"), 0o755)
	os.WriteFile(filepath.Join(tree, "usr/lib/systemd/system-generators/systemd-getty-generator"), []byte("x"), 0o755)
	os.WriteFile(filepath.Join(tree, "usr/lib/systemd/systemd"), []byte("x"), 0o755)
	host := t.TempDir()
	unit := filepath.Join(host, "u.service")
	os.WriteFile(unit, []byte("[Service]\n"), 0o644)
	tool := filepath.Join(host, "tool")
	os.WriteFile(tool, []byte("x"), 0o755)
	img := guestImage{
		conf:    map[string]string{},
		files:   map[string]string{"/etc/systemd/system/u.service": unit, "/lib/systemd/system/v.service": unit, "/bin/tool": tool},
		args:    []string{"/vmtest/payload", "-test.v"},
		systemd: &sysRoot{Dir: tree},
		guest:   "a",
	}
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	if err := writeImage(c, img); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	expect := map[string]uint64{
		"bin":                              modeLink | 0o777,
		"lib64":                            modeLink | 0o777,
		"usr/bin/busybox":                  modeFile | 0o755,
		"usr/bin/sh":                       modeLink | 0o777,
		"usr/bin/tool":                     modeFile | 0o755,
		"usr/lib/systemd/systemd":          modeFile | 0o755,
		"etc/systemd/system/u.service":     modeFile | 0o644,
		"usr/lib/systemd/system/v.service": modeFile | 0o644,
		"etc/systemd/system/vmtest.target": modeFile | 0o644,
		"etc/systemd/system/vmtest-payload.service":             modeFile | 0o644,
		"etc/systemd/system/default.target":                     modeLink | 0o777,
		"etc/systemd/system/getty.target":                       modeLink | 0o777,
		"etc/systemd/system-generators/systemd-getty-generator": modeLink | 0o777,
		"etc/machine-id": modeFile | 0o444,
		"init":           modeFile | 0o755,
	}
	for name, mode := range expect {
		if e, ok := got[name]; !ok || e.mode != mode {
			t.Errorf("%s: mode %o (present %v), want %o", name, e.mode, ok, mode)
		}
	}
	if !strings.Contains(got["etc/vmtest/guest.conf"].data, "export VMTEST_SYSTEMD='1'") {
		t.Errorf("guest.conf does not select systemd:\n%s", got["etc/vmtest/guest.conf"].data)
	}
	if !strings.Contains(got["etc/passwd"].data, "messagebus:") || !strings.Contains(got["etc/group"].data, "systemd-journal:") {
		t.Error("passwd/group lack the system accounts")
	}
	if id := strings.TrimSpace(got["etc/machine-id"].data); len(id) != 32 {
		t.Errorf("machine-id %q", id)
	}
}

// The apt stamp changes when a list changes and is empty without lists.
func TestAptStamp(t *testing.T) {
	dir := t.TempDir()
	glob := []string{filepath.Join(dir, "*_Packages*")}
	if s := aptStamp(glob); s != "" {
		t.Errorf("stamp without lists: %q", s)
	}
	p := filepath.Join(dir, "deb_dists_bookworm_main_binary-amd64_Packages")
	os.WriteFile(p, []byte("Package: a\n"), 0o644)
	s1 := aptStamp(glob)
	os.WriteFile(p, []byte("Package: a\nVersion: 2\n"), 0o644)
	if s2 := aptStamp(glob); s1 == "" || s1 == s2 {
		t.Errorf("stamps %q, %q: want different and not empty", s1, s2)
	}
}
