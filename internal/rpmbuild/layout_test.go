package rpmbuild

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/plugins/backend"
)

// repoRoot is the checkout this package is in.
func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(body, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func dsts(p *Package) map[string]File {
	m := map[string]File{}
	for _, f := range p.Files {
		m[f.Dst] = f
	}
	return m
}

// TestLayoutPicksUpNewFiles: units, rules, udev helpers and Scale files
// added to packaging/ are packaged where the macros say, with no code
// change; units are sorted into what the scriptlets do with them.
func TestLayoutPicksUpNewFiles(t *testing.T) {
	root := writeTree(t, map[string]string{
		"packaging/fabraid.conf":                         "",
		"packaging/systemd/fabraidd.service":             "[Service]\nType=notify\n[Install]\nWantedBy=multi-user.target\n",
		"packaging/systemd/fabraid-engine@.service":      "[Service]\nType=notify\n",
		"packaging/systemd/fabraid-assemble.service":     "[Service]\nType=oneshot\nRemainAfterExit=yes\n[Install]\nWantedBy=multi-user.target\n",
		"packaging/systemd/fabraid-assemble.timer":       "[Timer]\nOnActiveSec=30\n",
		"packaging/systemd/50-fabraid.preset":            "enable fabraidd.service\n",
		"packaging/systemd/README.md":                    "not packaged",
		"packaging/systemd/gpfs.service.d/fabraid.conf":  "[Unit]\nAfter=fabraidd.service\n",
		"packaging/udev/60-fabraid.rules":                "KERNEL==\"nvme*\"\n",
		"packaging/udev/fabraid-probe":                   "#!/bin/sh\n",
		"packaging/modules-load.d/fabraid.conf":          "nvmet\n",
		"packaging/tmpfiles.d/fabraid.conf":              "d /run/fabraid 0700 root root -\n",
		"packaging/scale/nsddevices":                     "#!/bin/ksh\n",
		"packaging/scale/fabraid-scale-prestartup":       "#!/bin/sh\n",
		"packaging/scale/callbacks/fabraid-callback.sh":  "#!/bin/sh\n",
		"packaging/scale/README.md":                      "how to install",
		"packaging/scale/callbacks/fabraid.callback.txt": "mmaddcallback ...",
	})
	p, err := Layout(root, []string{"fabraid.1", "fabraidd.8"})
	if err != nil {
		t.Fatal(err)
	}
	got := dsts(p)
	want := map[string]os.FileMode{
		"/usr/lib/systemd/system/fabraid-assemble.service":        0o644,
		"/usr/lib/systemd/system/fabraid-assemble.timer":          0o644,
		"/usr/lib/systemd/system-preset/50-fabraid.preset":        0o644,
		"/usr/lib/udev/rules.d/60-fabraid.rules":                  0o644,
		"/usr/lib/udev/fabraid-probe":                             0o755,
		"/usr/lib/modules-load.d/fabraid.conf":                    0o644,
		"/usr/lib/tmpfiles.d/fabraid.conf":                        0o644,
		"/usr/share/fabraid/scale/nsddevices":                     0o755,
		"/usr/share/fabraid/scale/callbacks":                      0o755,
		"/usr/share/fabraid/scale/callbacks/fabraid-callback.sh":  0o755,
		"/usr/share/fabraid/scale/callbacks/fabraid.callback.txt": 0o644,
		"/usr/share/fabraid/scale/README.md":                      0o644,
		"/usr/share/man/man1/fabraid.1.gz":                        0o644,
		"/usr/share/man/man8/fabraidd.8.gz":                       0o644,
		"/etc/fabraid/fabraid.conf":                               0o640,
		"/var/lib/fabraid":                                        0o700,
	}
	for dst, mode := range want {
		if f, ok := got[dst]; !ok || f.Mode != mode {
			t.Errorf("%s: got %+v, want mode %o", dst, f, mode)
		}
	}
	for dst := range got {
		if strings.Contains(dst, "README") && !strings.HasPrefix(dst, ScaleDir) && !strings.HasPrefix(dst, DocDir) {
			t.Errorf("README packaged as %s", dst)
		}
	}
	if l := got["/usr/libexec/fabraid/fabraid-scale-prestartup"]; l.Kind != Symlink || l.Src != "../../share/fabraid/scale/fabraid-scale-prestartup" {
		t.Errorf("callback not linked from /usr/libexec/fabraid: %+v", l)
	}
	for _, no := range []string{"/usr/libexec/fabraid/nsddevices", "/usr/libexec/fabraid/fabraid-callback.sh"} {
		if _, ok := got[no]; ok {
			t.Errorf("%s linked: only top-level fabraid-* programs are", no)
		}
	}
	if got["/etc/fabraid/fabraid.conf"].Kind != Config || got["/var/lib/fabraid"].Kind != Dir {
		t.Errorf("config/dir kinds wrong: %+v %+v", got["/etc/fabraid/fabraid.conf"], got["/var/lib/fabraid"])
	}
	wantUnits := Units{
		All:     []string{"fabraid-assemble.service", "fabraid-assemble.timer", "fabraid-engine@.service", "fabraidd.service"},
		Managed: []string{"fabraid-assemble.service", "fabraid-assemble.timer", "fabraidd.service"},
		Restart: []string{"fabraidd.service"},
		Enabled: []string{"fabraid-assemble.service", "fabraidd.service"},
	}
	if !reflect.DeepEqual(p.Units, wantUnits) {
		t.Errorf("units:\n got %+v\nwant %+v", p.Units, wantUnits)
	}
	if !p.UdevRules || !p.Scale {
		t.Errorf("UdevRules %v Scale %v, want both", p.UdevRules, p.Scale)
	}
	s := MakeScripts(p)
	if !strings.Contains(s.Posttrans, "udevadm trigger --subsystem-match=block --tag-match=fabraid --action=change") ||
		!strings.Contains(s.Posttrans, "udevadm control --reload") {
		t.Errorf("posttrans does not replay fabraid's devices through the rules:\n%s", s.Posttrans)
	}
	if strings.Contains(s.Postun, "fabraid-engine") || strings.Contains(s.Postun, "fabraid-assemble") {
		t.Errorf("upgrade restarts an engine or a oneshot:\n%s", s.Postun)
	}
}

// TestLayoutRefusesUnknownFiles: a file the RPM would not know where to put
// is an error, not silently left out of the package.
func TestLayoutRefusesUnknownFiles(t *testing.T) {
	for _, name := range []string{"packaging/systemd/fabraidd.conf", "packaging/udev/notes.txt", "packaging/modules-load.d/x.txt"} {
		root := writeTree(t, map[string]string{"packaging/fabraid.conf": "", name: "x"})
		if _, err := Layout(root, nil); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err %v, want one naming the file", name, err)
		}
	}
}

// TestScriptletsAreMacroExpansions: the scriptlets are what systemd's
// macros.systemd (252 in el9, 256 in el10) expands %systemd_post,
// %systemd_preun and %systemd_postun_with_restart to.
func TestScriptletsAreMacroExpansions(t *testing.T) {
	u := []string{"a.service", "b.target"}
	const h = "/usr/lib/systemd/systemd-update-helper"
	cases := []struct{ got, want string }{
		{SystemdPost(u), "if [ $1 -eq 1 ] && [ -x \"" + h + "\" ]; then\n    # Initial installation\n    " + h + " install-system-units a.service b.target || :\nfi\n"},
		{SystemdPreun(u), "if [ $1 -eq 0 ] && [ -x \"" + h + "\" ]; then\n    # Package removal, not upgrade\n    " + h + " remove-system-units a.service b.target || :\nfi\n"},
		{SystemdPostunWithRestart(u), "if [ $1 -ge 1 ] && [ -x \"" + h + "\" ]; then\n    # Package upgrade, not uninstall\n    " + h + " mark-restart-system-units a.service b.target || :\nfi\n"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got\n%s\nwant\n%s", c.got, c.want)
		}
	}
	if SystemdPost(nil) != "" {
		t.Error("no units: want no scriptlet")
	}
}

func TestRPMVersion(t *testing.T) {
	for _, c := range []struct {
		in    string
		n     int
		want  string
		isErr bool
	}{
		{"v1.2.0", 0, "1.2.0", false},
		{"v1.2.0-5-gabc1234", 0, "1.2.0^5.gabc1234", false},
		{"v1.2.0-5-gabc1234-dirty", 0, "1.2.0^5.gabc1234.dirty", false},
		{"abc1234", 173, "0^173.gabc1234", false},
		{"abc1234-dirty", 173, "0^173.gabc1234.dirty", false},
		{"release-x", 1, "", true},
	} {
		got, err := RPMVersion(c.in, c.n)
		if got != c.want || (err != nil) != c.isErr {
			t.Errorf("RPMVersion(%q, %d) = %q, %v; want %q", c.in, c.n, got, err, c.want)
		}
	}
}

// TestPresetNamesEnabledUnits: every shipped unit with an [Install]
// section is named by the preset file, or a first install would leave it
// disabled (el9/el10's 90-default.preset ends in "disable *").
func TestPresetNamesEnabledUnits(t *testing.T) {
	root := repoRoot(t)
	p, err := Layout(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var presets bytes.Buffer
	for _, f := range p.Files {
		if strings.HasPrefix(f.Dst, PresetDir+"/") {
			b, err := os.ReadFile(filepath.Join(root, f.Src))
			if err != nil {
				t.Fatal(err)
			}
			presets.Write(b)
		}
	}
	if len(p.Units.Enabled) == 0 {
		t.Fatal("no unit with [Install]: fabraidd.service should have one")
	}
	for _, u := range p.Units.Enabled {
		if !regexp.MustCompile(`(?m)^enable ` + regexp.QuoteMeta(u) + `$`).Match(presets.Bytes()) {
			t.Errorf("%s has [Install] but no preset file says \"enable %s\"", u, u)
		}
	}
}

// TestDefaultConfig: the packaged /etc/fabraid/fabraid.conf parses to the
// defaults and shows every key internal/config knows as a commented
// "#key = value" line. Uncommented, the lines parse (all of them), and the
// ones not marked as examples (a comment block saying "example" right
// above) give the defaults.
func TestDefaultConfig(t *testing.T) {
	body, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging/fabraid.conf"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(bytes.NewReader(body), "fabraid.conf")
	if err != nil {
		t.Fatalf("as shipped: %v", err)
	}
	if !reflect.DeepEqual(c, config.Default()) {
		t.Errorf("as shipped: got %+v, want the defaults", c)
	}
	setting := regexp.MustCompile(`^#([a-z_]+) =( .*)?$`)
	var all, defaults bytes.Buffer
	shown := map[string]bool{}
	// example: the comment block right above the current settings says so.
	example, afterSetting := false, false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		l := sc.Text()
		m := setting.FindStringSubmatch(l)
		switch {
		case m != nil:
			shown[m[1]] = true
			all.WriteString(l[1:] + "\n")
			if !example {
				defaults.WriteString(l[1:] + "\n")
			}
			afterSetting = true
		case strings.HasPrefix(l, "#"):
			if afterSetting { // a new comment block
				example = false
			}
			example = example || strings.Contains(l, "example")
			afterSetting = false
		default:
			example, afterSetting = false, false
		}
	}
	if _, err := config.Parse(&all, "fabraid.conf (all uncommented)"); err != nil {
		t.Errorf("uncommented: %v", err)
	}
	d, err := config.Parse(&defaults, "fabraid.conf (defaults uncommented)")
	if err != nil {
		t.Fatalf("defaults uncommented: %v", err)
	}
	if !reflect.DeepEqual(d, config.Default()) {
		t.Errorf("the lines not marked as examples are not the defaults:\n got %+v\nwant %+v", d, config.Default())
	}
	for _, k := range knownKeys(t) {
		if !shown[k] {
			t.Errorf("packaging/fabraid.conf does not show key %q (internal/config knows it): add a commented \"#%s = <default>\" line", k, k)
		}
	}
}

// knownKeys asks internal/config for its keys: its unknown-key error lists
// them.
func knownKeys(t *testing.T) []string {
	keys := config.Keys()
	if len(keys) < 10 {
		t.Fatalf("config.Keys() = %v", keys)
	}
	return keys
}

// TestSpecUpToDate: packaging/rpm/fabraid.spec is what the definition
// gives (run "make rpm-spec" after changing packaging/).
func TestSpecUpToDate(t *testing.T) {
	root := repoRoot(t)
	p, err := specLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Spec(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, SpecPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date: run \"make rpm-spec\" and commit it", SpecPath)
	}
}

// TestPluginDirIsTheDaemons: the RPMs install the plugins where fabraidd
// looks for them (plugins/backend.Dir), one per backend.
func TestPluginDirIsTheDaemons(t *testing.T) {
	if PluginDir != backend.Dir {
		t.Fatalf("PluginDir %s, fabraidd runs plugins from %s", PluginDir, backend.Dir)
	}
	for _, g := range Plugins {
		if backend.Binary(backend.Dir, strings.TrimPrefix(g, "fabraid-plugin-")) != PluginDir+"/"+g {
			t.Errorf("plugin %s is not backend.Binary of its name", g)
		}
		if _, err := os.Stat(filepath.Join("../../cmd", g, "main.go")); err != nil {
			t.Errorf("plugin %s has no command: %v", g, err)
		}
	}
}
