package rpmbuild

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Kind says how a packaged path is flagged in the RPM.
type Kind int

// Kinds of packaged paths.
const (
	Regular Kind = iota
	Config       // %config(noreplace)
	Doc          // %doc
	Dir          // %dir: a directory the package owns
	Symlink      // a symbolic link to Src
	License      // %license
)

// File is one path in the package.
type File struct {
	Dst  string      // absolute path on the installed system
	Src  string      // source, relative to the checkout root ("" for Dir and generated files); a Symlink's target
	Mode fs.FileMode // permission bits
	Kind Kind
	// Gen names a generated file (a binary, a man page, the completion);
	// the builder provides it, Src is empty.
	Gen string
}

// Paths where the RPM macros put things on el9 and el10.
const (
	BinDir       = "/usr/bin"                       // %{_bindir}
	SbinDir      = "/usr/sbin"                      // %{_sbindir}
	UnitDir      = "/usr/lib/systemd/system"        // %{_unitdir}
	PresetDir    = "/usr/lib/systemd/system-preset" // %{_presetdir}
	UdevDir      = "/usr/lib/udev"                  // %{_prefix}/lib/udev (udev helpers)
	UdevRulesDir = "/usr/lib/udev/rules.d"          // %{_udevrulesdir}
	ModulesLoad  = "/usr/lib/modules-load.d"        // %{_modulesloaddir}
	TmpfilesDir  = "/usr/lib/tmpfiles.d"            // %{_tmpfilesdir}
	ConfDir      = "/etc/fabraid"                   // %{_sysconfdir}/fabraid
	StateDir     = "/var/lib/fabraid"               // %{_localstatedir}/lib/fabraid
	DataDir      = "/usr/share/fabraid"             // %{_datadir}/fabraid
	ScaleDir     = "/usr/share/fabraid/scale"       // %{_datadir}/fabraid/scale
	LibexecDir   = "/usr/libexec/fabraid"           // %{_libexecdir}/fabraid
	PluginDir    = "/usr/libexec/fabraid/plugins"   // target backend plugins (plugins/backend.Dir)
	DocDir       = "/usr/share/doc/fabraid"         // %{_docdir}/fabraid
	LicenseDir   = "/usr/share/licenses/fabraid"    // %{_defaultlicensedir}/fabraid
	// ModuleLicenseDir holds the license files of the Go modules linked
	// into the binaries, by module path (BundledPath).
	ModuleLicenseDir = LicenseDir + "/modules"
	ManDir           = "/usr/share/man"                         // %{_mandir}
	CompletionDir    = "/usr/share/bash-completion/completions" // %{bash_completions_dir}
)

// Units holds the systemd units a package ships, by what its scriptlets do
// with them.
type Units struct {
	// All lists every unit file shipped, templates included.
	All []string
	// Managed are the non-template units: preset on first install
	// (%systemd_post), disabled and stopped on erase (%systemd_preun).
	// Templates are left alone: fabraidd starts and stops their instances.
	Managed []string
	// Restart are the managed long-running services restarted after an
	// upgrade (%systemd_postun_with_restart): not oneshot services, not
	// targets or timers, and never the engine template (an engine restart
	// is a ublk recovery: every consumer of its volume pauses).
	Restart []string
	// Enabled are the units with an [Install] section, which the preset
	// file must name.
	Enabled []string
}

// Package is the definition both the package build and the .spec come from.
type Package struct {
	Name        string
	Summary     string
	Description string
	License     string
	URL         string
	Vendor      string
	Requires    []string
	// ScriptRequires are needed by the %post, %preun and %postun
	// scriptlets: each is Requires(post), Requires(preun) and
	// Requires(postun) (what %{?systemd_requires} says on el9/el10), so
	// that rpm installs it before and erases it after this package.
	ScriptRequires []string
	Recommends     []string
	// Provides are bundled(golang(PATH)) = VERSION for every Go module
	// linked into the binaries (BundledPath).
	Provides []string
	Files    []File // sorted by Dst
	Units    Units
	// UdevRules is true when the package ships udev rules: its %posttrans
	// reloads udev and replays "change" for block devices, so that drives
	// already present (existing members) are seen by the new rules.
	UdevRules bool
	// Scale is true when Storage Scale files are shipped (packaging/scale).
	Scale bool
}

// Generated file names (File.Gen).
const (
	GenFabraid  = "fabraid"
	GenFabraidd = "fabraidd"
	// The target backend plugins (docs/plugins.md), built like fabraidd.
	GenPluginNvmet = "fabraid-plugin-nvmet"
	GenPluginSPDK  = "fabraid-plugin-spdk"
	GenCompletion  = "completion"
	GenMan         = "man:" // followed by the page's file name, e.g. man:fabraid.1
)

// Plugins are the plugin binaries shipped in PluginDir (File.Gen names).
var Plugins = []string{GenPluginNvmet, GenPluginSPDK}

// isBinary tells the File.Gen names that are compiled binaries.
func isBinary(gen string) bool {
	return gen == GenFabraid || gen == GenFabraidd || slices.Contains(Plugins, gen)
}

// Layout reads the checkout at root and returns the package definition.
// manPages names the generated man pages (e.g. "fabraid.1", "fabraidd.8");
// they are installed gzip-compressed under ManDir/manN.
func Layout(root string, manPages []string) (*Package, error) {
	p := &Package{
		Name:    "fabraid",
		Summary: "Shared, protected NVMe pools from the drives in HPC nodes",
		Description: "fabraid turns the NVMe drives of HPC and GPU nodes into one protected pool:\n" +
			"kernel nvmet exports and nvme-tcp imports, a Reed-Solomon parity engine\n" +
			"behind a ublk block device, the node daemon fabraidd and the fabraid CLI.",
		License: "LicenseRef-fabraid",
		URL:     "https://github.com/fabraid/fabraid",
		Vendor:  "fabraid",
		// systemd runs the units, its modules-load and tmpfiles; kmod loads
		// the modules. Kernel modules themselves are checked by
		// "fabraid doctor", not required: they come with the kernel.
		Requires: []string{"systemd", "kmod"},
		// The scriptlets call systemd-update-helper and systemctl.
		ScriptRequires: []string{"systemd"},
		// nvme-cli writes /etc/nvme/hostnqn and helps debugging; the daemon
		// does not call it.
		Recommends: []string{"nvme-cli", "bash-completion"},
	}
	add := func(f File) { p.Files = append(p.Files, f) }
	add(File{Dst: BinDir + "/fabraid", Mode: 0o755, Gen: GenFabraid})
	add(File{Dst: SbinDir + "/fabraidd", Mode: 0o755, Gen: GenFabraidd})
	add(File{Dst: CompletionDir + "/fabraid", Mode: 0o644, Gen: GenCompletion})
	for _, m := range manPages {
		sec := strings.TrimPrefix(path.Ext(m), ".")
		add(File{Dst: fmt.Sprintf("%s/man%s/%s.gz", ManDir, sec, m), Mode: 0o644, Kind: Doc, Gen: GenMan + m})
	}
	add(File{Dst: ConfDir, Mode: 0o755, Kind: Dir})
	add(File{Dst: ConfDir + "/fabraid.conf", Src: "packaging/fabraid.conf", Mode: 0o640, Kind: Config})
	add(File{Dst: StateDir, Mode: 0o700, Kind: Dir})
	add(File{Dst: DocDir, Mode: 0o755, Kind: Dir})
	add(File{Dst: LicenseDir, Mode: 0o755, Kind: Dir})
	if exists(filepath.Join(root, "LICENSE")) {
		add(File{Dst: LicenseDir + "/LICENSE", Src: "LICENSE", Mode: 0o644, Kind: License})
	}
	mods, err := ReadBundled(root)
	if err != nil {
		return nil, err
	}
	p.Provides = BundledProvides(mods)
	// The units' Documentation= names admin-guide.md.
	for _, d := range []string{"README.md", "docs/admin-guide.md", "docs/install.md"} {
		add(File{Dst: DocDir + "/" + path.Base(d), Src: d, Mode: 0o644, Kind: Doc})
	}
	// Owned even when packaging/scale is empty, so that the .spec does not
	// depend on whether it exists.
	add(File{Dst: DataDir, Mode: 0o755, Kind: Dir})
	add(File{Dst: ScaleDir, Mode: 0o755, Kind: Dir})
	add(File{Dst: LibexecDir, Mode: 0o755, Kind: Dir})
	// fabraidd runs plugins only from here, root's and not writable by
	// anyone else (plugins/backend CheckBinary).
	add(File{Dst: PluginDir, Mode: 0o755, Kind: Dir})
	for _, g := range Plugins {
		add(File{Dst: PluginDir + "/" + g, Mode: 0o755, Gen: g})
	}
	steps := []func(string, *Package) error{addSystemd, addUdev, addDirFiles("packaging/modules-load.d", ModulesLoad, ".conf"),
		addDirFiles("packaging/tmpfiles.d", TmpfilesDir, ".conf"), addScale}
	for _, step := range steps {
		if err := step(root, p); err != nil {
			return nil, err
		}
	}
	sort.Slice(p.Files, func(i, j int) bool { return p.Files[i].Dst < p.Files[j].Dst })
	return p, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// listDir returns the regular files of root/dir, sorted, without README*;
// a missing directory is empty.
func listDir(root, dir string) ([]fs.DirEntry, error) {
	ents, err := os.ReadDir(filepath.Join(root, dir))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("layout: %w", err)
	}
	var out []fs.DirEntry
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "README") || e.Name()[0] == '.' {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

var unitSuffixes = []string{".service", ".target", ".timer", ".socket", ".path", ".mount"}

func isUnit(name string) bool {
	for _, s := range unitSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// addSystemd packages packaging/systemd: units into UnitDir, *.preset into
// PresetDir, drop-in directories (NAME.d/*.conf, e.g. for Scale's
// gpfs.service) into UnitDir/NAME.d; and sorts the units by what the
// scriptlets do with them.
func addSystemd(root string, p *Package) error {
	const dir = "packaging/systemd"
	ents, err := listDir(root, dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name, src := e.Name(), dir+"/"+e.Name()
		switch {
		case e.IsDir() && strings.HasSuffix(name, ".d"):
			if err := addDropIns(root, src, UnitDir+"/"+name, p); err != nil {
				return err
			}
		case isUnit(name):
			p.Files = append(p.Files, File{Dst: UnitDir + "/" + name, Src: src, Mode: 0o644})
			if err := classifyUnit(filepath.Join(root, src), name, &p.Units); err != nil {
				return err
			}
		case strings.HasSuffix(name, ".preset"):
			p.Files = append(p.Files, File{Dst: PresetDir + "/" + name, Src: src, Mode: 0o644})
		default:
			return fmt.Errorf("layout: %s: not a unit or preset file (the RPM would not know where to put it)", src)
		}
	}
	return nil
}

// addDropIns packages the *.conf files of the drop-in directory src into
// dst; the package owns dst.
func addDropIns(root, src, dst string, p *Package) error {
	ents, err := listDir(root, src)
	if err != nil {
		return err
	}
	p.Files = append(p.Files, File{Dst: dst, Mode: 0o755, Kind: Dir})
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".conf") {
			return fmt.Errorf("layout: %s/%s: a drop-in directory holds *.conf files only", src, e.Name())
		}
		p.Files = append(p.Files, File{Dst: dst + "/" + e.Name(), Src: src + "/" + e.Name(), Mode: 0o644})
	}
	return nil
}

func classifyUnit(file, name string, u *Units) error {
	body, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	u.All = append(u.All, name)
	if strings.Contains(name, "@.") {
		return nil
	}
	u.Managed = append(u.Managed, name)
	sections := unitSections(body)
	if _, ok := sections["Install"]; ok {
		u.Enabled = append(u.Enabled, name)
	}
	if strings.HasSuffix(name, ".service") && sections["Service"]["Type"] != "oneshot" {
		u.Restart = append(u.Restart, name)
	}
	return nil
}

// unitSections parses a unit file into section -> key -> last value.
func unitSections(body []byte) map[string]map[string]string {
	out := map[string]map[string]string{}
	var cur map[string]string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[' && strings.HasSuffix(l, "]"):
			cur = map[string]string{}
			out[l[1:len(l)-1]] = cur
		case cur != nil:
			if k, v, ok := strings.Cut(l, "="); ok {
				cur[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// addUdev packages packaging/udev: *.rules into UdevRulesDir, executable
// helpers (programs the rules run) into UdevDir.
func addUdev(root string, p *Package) error {
	const dir = "packaging/udev"
	ents, err := listDir(root, dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name, src := e.Name(), dir+"/"+e.Name()
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("layout: %w", err)
		}
		switch {
		case strings.HasSuffix(name, ".rules"):
			p.Files = append(p.Files, File{Dst: UdevRulesDir + "/" + name, Src: src, Mode: 0o644})
			p.UdevRules = true
		case info.Mode().IsRegular() && info.Mode()&0o111 != 0:
			p.Files = append(p.Files, File{Dst: UdevDir + "/" + name, Src: src, Mode: 0o755})
		default:
			return fmt.Errorf("layout: %s: neither a .rules file nor an executable helper", src)
		}
	}
	return nil
}

// addDirFiles packages the files with suffix of dir into dst.
func addDirFiles(dir, dst, suffix string) func(string, *Package) error {
	return func(root string, p *Package) error {
		ents, err := listDir(root, dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), suffix) || !e.Type().IsRegular() {
				return fmt.Errorf("layout: %s/%s: want a %s file", dir, e.Name(), suffix)
			}
			p.Files = append(p.Files, File{Dst: dst + "/" + e.Name(), Src: dir + "/" + e.Name(), Mode: 0o644})
		}
		return nil
	}
}

// addScale packages the tree packaging/scale under ScaleDir, READMEs
// included; files with an execute bit are 0755, others 0644. The
// top-level fabraid-* programs (the Scale callbacks) are also linked from
// LibexecDir, the paths mmaddcallback is given (docs/storage-scale.md).
// nsddevices is not installed where Scale runs it (/var/mmfs/etc belongs
// to Scale and a site may have its own user exit): the administrator
// copies it.
func addScale(root string, p *Package) error {
	const dir = "packaging/scale"
	base := filepath.Join(root, dir)
	if !exists(base) {
		return nil
	}
	p.Scale = true
	return filepath.WalkDir(base, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("layout: %w", err)
		}
		rel, _ := filepath.Rel(base, fp)
		rel = filepath.ToSlash(rel)
		dst := ScaleDir
		if rel != "." {
			dst += "/" + rel
		}
		switch {
		case rel == ".":
		case d.IsDir():
			p.Files = append(p.Files, File{Dst: dst, Mode: 0o755, Kind: Dir})
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return fmt.Errorf("layout: %w", err)
			}
			mode := fs.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			p.Files = append(p.Files, File{Dst: dst, Src: dir + "/" + rel, Mode: mode})
			if mode == 0o755 && !strings.Contains(rel, "/") && strings.HasPrefix(rel, "fabraid-") {
				p.Files = append(p.Files, File{Dst: LibexecDir + "/" + rel, Src: "../../share/fabraid/scale/" + rel,
					Mode: 0o777, Kind: Symlink})
			}
		default:
			return fmt.Errorf("layout: %s/%s: not a regular file or directory", dir, rel)
		}
		return nil
	})
}
