package rpmbuild

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// specEntry is one %files line of the .spec after rpm expanded its macros.
type specEntry struct {
	pattern          string
	dir, doc, config bool
	license          bool
	mode             string // from %attr, "" if none
	matched          bool
}

func parseSpecFiles(t *testing.T, expanded string) []*specEntry {
	t.Helper()
	_, rest, ok := strings.Cut(expanded, "\n%files\n")
	if !ok {
		t.Fatal("no files section in the expanded .spec")
	}
	rest, _, _ = strings.Cut(rest, "\n%changelog")
	attr := regexp.MustCompile(`^%attr\((\d+),root,root\)$`)
	var out []*specEntry
	for _, l := range strings.Split(rest, "\n") {
		fs := strings.Fields(l)
		if len(fs) == 0 {
			continue
		}
		e := &specEntry{pattern: fs[len(fs)-1]}
		for _, d := range fs[:len(fs)-1] {
			switch {
			case d == "%dir":
				e.dir = true
			case d == "%doc":
				e.doc = true
			case d == "%config(noreplace)":
				e.config = true
			case d == "%license":
				e.license = true
			case attr.MatchString(d):
				e.mode = attr.FindStringSubmatch(d)[1]
			default:
				t.Fatalf("%%files line %q: unknown directive %q", l, d)
			}
		}
		out = append(out, e)
	}
	return out
}

func (e *specEntry) matches(p string) bool {
	if strings.HasSuffix(e.pattern, "/") {
		return p == strings.TrimSuffix(e.pattern, "/") || strings.HasPrefix(p, e.pattern)
	}
	ok, _ := path.Match(e.pattern, p)
	return ok
}

// permOctal turns "-rw-r-----" into "0640".
func permOctal(perms string) string {
	n := 0
	for i, c := range perms[1:10] {
		if c != '-' {
			n |= 1 << (8 - i)
		}
	}
	return fmt.Sprintf("%04o", n)
}

// TestSpecMatchesPackage: the checked-in .spec, expanded by rpm, lists the
// files of the make-rpm package with the same directories, modes, %config and
// %doc flags, and declares the same dependencies and scriptlet units.
func TestSpecMatchesPackage(t *testing.T) {
	f := getFixture(t)
	needTools(t, "rpmspec")
	// rpm on this host has no systemd-rpm-macros: give it el9's values.
	spec := filepath.Join(f.opts.Root, SpecPath)
	rpmspec := func(args ...string) string {
		defs := []string{"--define", "_unitdir " + UnitDir, "--define", "_presetdir " + PresetDir,
			"--define", "_udevrulesdir " + UdevRulesDir, "--define", "_modulesloaddir " + ModulesLoad,
			"--define", "_tmpfilesdir " + TmpfilesDir}
		return run(t, "rpmspec", append(append(defs, args...), spec)...)
	}
	entries := parseSpecFiles(t, rpmspec("-P"))
	pkg := f.pkgs["el9/x86_64"]
	for _, l := range lines(run(t, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILEFLAGS:fflags}: %{FILENAMES}\n]`, pkg)) {
		perms, rest, _ := strings.Cut(l, " ")
		flags, p, _ := strings.Cut(rest, ": ")
		var hit bool
		for _, e := range entries {
			if !e.matches(p) {
				continue
			}
			hit, e.matched = true, true
			if e.dir && perms[0] != 'd' || e.config != strings.Contains(flags, "c") ||
				(e.config && !strings.Contains(flags, "n")) || e.doc && !strings.Contains(flags, "d") ||
				e.license && perms[0] != 'd' && !strings.Contains(flags, "l") {
				t.Errorf("%s (%s %q) does not fit %%files entry %+v", p, perms, flags, *e)
			}
			if e.mode != "" && (e.dir || !strings.HasSuffix(e.pattern, "/")) && e.mode != permOctal(perms) {
				t.Errorf("%s: mode %s, .spec says %s", p, permOctal(perms), e.mode)
			}
		}
		if !hit {
			t.Errorf("%s is in the package, not in the .spec's %%files", p)
		}
	}
	for _, e := range entries {
		if !e.matched {
			t.Errorf(".spec %%files entry %q matches nothing in the package", e.pattern)
		}
	}
	norm := func(s string) string {
		var keep []string
		for _, l := range lines(s) {
			if l != "/bin/sh" && !strings.HasPrefix(l, "/bin/sh ") && !strings.HasPrefix(l, "rpmlib(") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, " ")
	}
	reqs := `[%{REQUIRENAME} %{REQUIREFLAGS:deptype}\n]` // with post, preun, postun
	if a, b := norm(rpmspec("-q", "--qf", reqs)), norm(run(t, "rpm", "-qp", "--qf", reqs, pkg)); a != b {
		t.Errorf("Requires: .spec %q, package %q", a, b)
	}
	bundled := func(s string) []string {
		var out []string
		for _, l := range lines(s) {
			if strings.HasPrefix(l, "bundled(") {
				out = append(out, l)
			}
		}
		return out
	}
	if a, b := bundled(rpmspec("-q", "--provides")), bundled(run(t, "rpm", "-qp", "--provides", pkg)); strings.Join(a, " ") != strings.Join(b, " ") || len(a) == 0 {
		t.Errorf("bundled Provides: .spec %q, package %q", a, b)
	}
	recs := `[%{RECOMMENDNAME}\n]`
	if a, b := norm(rpmspec("-q", "--qf", recs)), norm(run(t, "rpm", "-qp", "--qf", recs, pkg)); a != b {
		t.Errorf("Recommends: .spec %q, package %q", a, b)
	}
	body := rpmspec("-P")
	for macro, units := range map[string][]string{"%systemd_post": f.def.Units.Managed, "%systemd_preun": f.def.Units.Managed,
		"%systemd_postun_with_restart": f.def.Units.Restart} {
		if want := macro + " " + strings.Join(units, " ") + "\n"; !strings.Contains(body, want) {
			t.Errorf(".spec lacks %q", want)
		}
	}
}
