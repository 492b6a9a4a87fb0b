package rpmbuild

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"text/template"
)

// SpecPath is where the checked-in .spec lives, relative to the checkout.
const SpecPath = "packaging/rpm/fabraid.spec"

// macroDirs maps install paths to the macros that name them (el9 and
// el10 values: systemd-rpm-macros, redhat-rpm-config), longest first.
var macroDirs = []struct{ dir, macro string }{
	{CompletionDir, "%{bash_completions_dir}"},
	{PresetDir, "%{_presetdir}"},
	{UnitDir, "%{_unitdir}"},
	{UdevRulesDir, "%{_udevrulesdir}"},
	{UdevDir, "%{_prefix}/lib/udev"},
	{ModulesLoad, "%{_modulesloaddir}"},
	{TmpfilesDir, "%{_tmpfilesdir}"},
	{DocDir, "%{_docdir}/fabraid"},
	{"/usr/share/licenses", "%{_defaultlicensedir}"},
	{ManDir, "%{_mandir}"},
	{"/usr/share", "%{_datadir}"},
	{"/usr/libexec", "%{_libexecdir}"},
	{BinDir, "%{_bindir}"},
	{SbinDir, "%{_sbindir}"},
	{"/var/lib", "%{_localstatedir}/lib"},
	{"/etc", "%{_sysconfdir}"},
}

// macroPath spells an install path with the RPM macros.
func macroPath(p string) string {
	for _, m := range macroDirs {
		if p == m.dir || strings.HasPrefix(p, m.dir+"/") {
			return m.macro + strings.TrimPrefix(p, m.dir)
		}
	}
	return p
}

// goListModuleDirs is the go list -deps format that prints "path dir" of
// every module linked (not the main one).
const goListModuleDirs = `{{with .Module}}{{if not .Main}}{{.Path}} {{.Dir}}{{end}}{{end}}`

// specCommands are shippedCommands as the .spec's %build spells them.
var specCommands = []string{"./cmd/fabraid", "./cmd/fabraidd", "./cmd/fabraid-plugin-*"}

type specFile struct {
	Install []string // %install lines
	Files   []string // %files lines
}

// specFiles turns the definition into %install and %files lines. Man pages,
// the completion, the Storage Scale tree and its links are spelled as globs,
// loops and whole directories, so that a new command or Scale file needs no
// .spec change.
func specFiles(p *Package) specFile {
	var s specFile
	s.Install = []string{
		"install -D -m 0755 bin/fabraid %{buildroot}%{_bindir}/fabraid",
		"install -D -m 0755 bin/fabraidd %{buildroot}%{_sbindir}/fabraidd",
		"install -D -m 0644 fabraid.bash %{buildroot}%{bash_completions_dir}/fabraid",
		"install -d %{buildroot}%{_mandir}/man1 %{buildroot}%{_mandir}/man5 %{buildroot}%{_mandir}/man8",
		"install -p -m 0644 man/*.1 %{buildroot}%{_mandir}/man1/",
		"install -p -m 0644 man/*.5 %{buildroot}%{_mandir}/man5/",
		"install -p -m 0644 man/*.8 %{buildroot}%{_mandir}/man8/",
		"install -d -m 0755 %{buildroot}%{_datadir}/fabraid/scale",
		"if [ -d packaging/scale ]; then cp -pr packaging/scale/. %{buildroot}%{_datadir}/fabraid/scale/; fi",
		"install -d -m 0755 %{buildroot}%{_libexecdir}/fabraid",
		"install -d -m 0755 %{buildroot}%{_libexecdir}/fabraid/plugins",
		"install -p -m 0755 bin/fabraid-plugin-* %{buildroot}%{_libexecdir}/fabraid/plugins/",
		"for f in packaging/scale/fabraid-*; do [ -x \"$f\" ] && ln -s ../../share/fabraid/scale/${f##*/} %{buildroot}%{_libexecdir}/fabraid/; done",
		"install -D -p -m 0644 LICENSE %{buildroot}%{_defaultlicensedir}/fabraid/LICENSE",
		"# The license files of the Go modules the binaries link (" + BundledPath + ")",
		"go list -deps -f '" + goListModuleDirs + "' " + strings.Join(specCommands, " ") + " | sort -u | while read -r mod dir; do",
		"  if [ -d vendor ]; then dir=vendor/$mod; fi",
		"  for f in \"$dir\"/*; do case \"${f##*/}\" in [Ll][Ii][Cc][Ee][Nn][CcSs][Ee]*|[Cc][Oo][Pp][Yy][Ii][Nn][Gg]*|[Nn][Oo][Tt][Ii][Cc][Ee]*|[Pp][Aa][Tt][Ee][Nn][Tt][Ss]*|[Uu][Nn][Ll][Ii][Cc][Ee][Nn][Ss][Ee]*)",
		"    install -D -p -m 0644 \"$f\" \"%{buildroot}%{_defaultlicensedir}/fabraid/modules/$mod/${f##*/}\";; esac; done",
		"done",
	}
	s.Files = []string{
		"%{_bindir}/fabraid",
		"%{_sbindir}/fabraidd",
		"%{bash_completions_dir}/fabraid",
		"%{_mandir}/man1/fabraid*.1*",
		"%{_mandir}/man5/fabraid.conf.5*",
		"%{_mandir}/man8/fabraidd*.8*",
		"%{_datadir}/fabraid/",
		"%{_libexecdir}/fabraid/",
		"%license %{_defaultlicensedir}/fabraid/",
	}
	for _, f := range p.Files {
		if f.Gen != "" || strings.HasPrefix(f.Dst, DataDir) || strings.HasPrefix(f.Dst, LibexecDir) || strings.HasPrefix(f.Dst, LicenseDir) {
			continue
		}
		m := macroPath(f.Dst)
		switch f.Kind {
		case Dir:
			s.Install = append(s.Install, fmt.Sprintf("install -d -m %04o %%{buildroot}%s", f.Mode, m))
			s.Files = append(s.Files, fmt.Sprintf("%%dir %%attr(%04o,root,root) %s", f.Mode, m))
		case Config:
			s.Install = append(s.Install, fmt.Sprintf("install -D -p -m %04o %s %%{buildroot}%s", f.Mode, f.Src, m))
			s.Files = append(s.Files, fmt.Sprintf("%%config(noreplace) %%attr(%04o,root,root) %s", f.Mode, m))
		case Doc:
			s.Install = append(s.Install, fmt.Sprintf("install -D -p -m %04o %s %%{buildroot}%s", f.Mode, f.Src, m))
			s.Files = append(s.Files, "%doc "+m)
		default:
			s.Install = append(s.Install, fmt.Sprintf("install -D -p -m %04o %s %%{buildroot}%s", f.Mode, f.Src, m))
			if f.Mode != 0o644 && f.Mode != 0o755 {
				m = fmt.Sprintf("%%attr(%04o,root,root) %s", f.Mode, m)
			}
			s.Files = append(s.Files, m)
		}
	}
	return s
}

var specTemplate = template.Must(template.New("spec").Parse(`# fabraid.spec: for sites that rebuild fabraid with rpmbuild or mock.
# GENERATED by "make rpm-spec" from the definition the packages of
# "make rpm" are built from (internal/rpmbuild); a test fails when this file
# is out of date. Do not edit: change packaging/ or internal/rpmbuild.
#
#   git archive --prefix=fabraid-VERSION/ -o fabraid-VERSION.tar.gz HEAD
#   rpmbuild -ta fabraid-VERSION.tar.gz --define 'fabraid_version VERSION'
#
# Go modules: a tree with vendor/ (go mod vendor) builds offline (mock);
# without it, go needs the module proxy. Needs Go >= 1.26.

# systemd-rpm-macros names the unit, preset, udev rules, modules-load and
# tmpfiles directories; bash-completion may not name its directory:
%{!?bash_completions_dir:%global bash_completions_dir %{_datadir}/bash-completion/completions}

# Static, stripped Go binaries: no debuginfo package, no build-id links
# (the make-rpm packages have none either).
%global debug_package %{nil}
%global _build_id_links none

Name:           {{.P.Name}}
Version:        %{?fabraid_version}%{!?fabraid_version:0}
Release:        1%{?dist}
Summary:        {{.P.Summary}}
License:        {{.P.License}}
URL:            {{.P.URL}}
Source0:        %{name}-%{version}.tar.gz
ExclusiveArch:  x86_64 aarch64

BuildRequires:  golang >= 1.26
BuildRequires:  systemd-rpm-macros
{{range .P.Requires}}Requires:       {{.}}
{{end}}{{range .P.ScriptRequires}}Requires(post): {{.}}
Requires(preun): {{.}}
Requires(postun): {{.}}
{{end}}{{range .P.Recommends}}Recommends:     {{.}}
{{end}}# Go modules compiled into the binaries ({{.Bundled}}):
{{range .P.Provides}}Provides:       {{.}}
{{end}}
%description
{{.P.Description}}

%prep
%setup -q

%build
export CGO_ENABLED=0
if [ -d vendor ]; then export GOFLAGS=-mod=vendor; fi
go build -trimpath -ldflags "-s -w -X main.version=%{version}" -o bin/ {{.Commands}}
./bin/fabraid man man
./bin/fabraidd man man
./bin/fabraid completion bash > fabraid.bash

%install
{{range .S.Install}}{{.}}
{{end}}
%post
%systemd_post {{.Managed}}

%preun
%systemd_preun {{.Managed}}
{{.EngineNote}}
%postun
%systemd_postun_with_restart {{.Restart}}
{{if .Posttrans}}
%posttrans
{{.Posttrans}}{{end}}
%files
{{range .S.Files}}{{.}}
{{end}}
%changelog
* Tue Dec 01 2026 {{.Maintainer}} - 0-1
- RPM packaging: generated from internal/rpmbuild
`))

// Spec returns the .spec text for p.
func Spec(p *Package) ([]byte, error) {
	sc := MakeScripts(p)
	note := ""
	if strings.Contains(sc.Preun, engineNote) {
		note = engineNote
	}
	var b bytes.Buffer
	err := specTemplate.Execute(&b, map[string]any{
		"P": p, "S": specFiles(p), "Maintainer": maintainer, "Bundled": BundledPath, "Commands": strings.Join(specCommands, " "),
		"Managed":    strings.Join(p.Units.Managed, " "),
		"Restart":    strings.Join(p.Units.Restart, " "),
		"EngineNote": note, "Posttrans": sc.Posttrans,
	})
	return b.Bytes(), err
}

// specLayout is the definition the .spec is written from: without man
// pages (the .spec globs them).
func specLayout(root string) (*Package, error) { return Layout(root, nil) }

// WriteSpecFile writes the .spec of the checkout at root to file.
func WriteSpecFile(root, file string) error {
	p, err := specLayout(root)
	if err != nil {
		return err
	}
	b, err := Spec(p)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}
