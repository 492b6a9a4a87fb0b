package rpmbuild

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBundledUpToDate: packaging/rpm/bundled-go-modules.txt names exactly
// the modules, at the versions, that go list says the shipped binaries
// link on both architectures; it fails when go.mod (or an import) changed
// and "make rpm-spec" was not run.
func TestBundledUpToDate(t *testing.T) {
	needTools(t, "go")
	root := repoRoot(t)
	got, err := LinkedModules(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	list, err := ReadBundled(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(FormatBundled(got)); string(FormatBundled(list)) != want {
		t.Errorf("%s is out of date: run make rpm-spec; go list says\n%s", BundledPath, want)
	}
	if len(got) == 0 {
		t.Fatal("go list found no linked module")
	}
	for _, m := range got {
		if m.Dir == "" {
			t.Errorf("%s: no module directory (licenses cannot be copied)", m.Path)
		}
	}
	lic, err := ModuleLicenses(got)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]bool{}
	for _, f := range lic {
		if f.Kind == License || f.Kind == Symlink { // a copy, or a link to an identical one
			per[strings.TrimPrefix(filepath.Dir(f.Dst), ModuleLicenseDir+"/")] = true
		}
	}
	for _, m := range got {
		if !per[m.Path] {
			t.Errorf("no license file shipped for %s", m.Path)
		}
	}
}

func TestBundledVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3": "1.2.3", "v22.7.0": "22.7.0", "v2.0.0+incompatible": "2.0.0", "v1.0.0-rc.1": "1.0.0~rc.1",
		"v0.0.0-20191010083416-a7dc8b61c822": "0.0.0~20191010083416~a7dc8b61c822",
	} {
		if got := BundledVersion(in); got != want {
			t.Errorf("BundledVersion(%q) = %q, want %q", in, got, want)
		}
	}
	mods := []Module{{Path: "github.com/a/b/v2", Version: "v2.1.0"}}
	if p := BundledProvides(mods); len(p) != 1 || p[0] != "bundled(golang(github.com/a/b/v2)) = 2.1.0" {
		t.Errorf("BundledProvides: %q", p)
	}
}

// TestModuleLicensesRefusesUnlicensed: a module without a license file is
// a build error, not a package without its terms.
func TestModuleLicensesRefusesUnlicensed(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("x"), 0o644)
	if _, err := ModuleLicenses([]Module{{Path: "example.com/x", Dir: dir}}); err == nil || !strings.Contains(err.Error(), "no LICENSE") {
		t.Errorf("unlicensed module: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "LICENSE.txt"), []byte("x"), 0o644)
	fs, err := ModuleLicenses([]Module{{Path: "example.com/x", Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	d := dsts(&Package{Files: fs})
	if d[ModuleLicenseDir+"/example.com/x/LICENSE.txt"].Kind != License || d[ModuleLicenseDir+"/example.com"].Kind != Dir ||
		d[ModuleLicenseDir].Kind != Dir || len(fs) != 4 {
		t.Errorf("files %+v", fs)
	}
}

// TestUdevReplayScoped: %posttrans replays only the devices 69-fabraid.rules
// tags (members and volume heads), never every block device, and the rules
// do tag both.
func TestUdevReplayScoped(t *testing.T) {
	s := MakeScripts(&Package{UdevRules: true})
	triggers := regexp.MustCompile(`udevadm trigger[^\n]*`).FindAllString(s.Posttrans, -1)
	if len(triggers) == 0 {
		t.Fatalf("no udevadm trigger in %%posttrans:\n%s", s.Posttrans)
	}
	for _, tr := range triggers {
		if !strings.Contains(tr, "--tag-match="+UdevTag) {
			t.Errorf("%q replays devices fabraid's rules never tagged", tr)
		}
	}
	rules, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging/udev/69-fabraid.rules"))
	if err != nil {
		t.Fatal(err)
	}
	body := string(rules)
	head, member := strings.Index(body, `LABEL="fabraid_head"`), strings.Index(body, `ENV{SYSTEMD_WANTS}+=`)
	tags := regexp.MustCompile(`TAG\+="`+UdevTag+`"`).FindAllStringIndex(body, -1)
	var onMember, onHead bool
	for _, m := range tags {
		onMember = onMember || (m[0] < member && m[0] < head)
		onHead = onHead || m[0] > head
	}
	if head < 0 || member < 0 || !onMember || !onHead {
		t.Errorf("69-fabraid.rules must tag members and heads %q (member %v, head %v)", UdevTag, onMember, onHead)
	}
}
