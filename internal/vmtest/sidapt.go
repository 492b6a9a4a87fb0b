package vmtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Debian sid's kernel (series Kernel7) is not in the host's apt sources.
// The harness fetches it with a private apt configuration under its cache
// directory: a sources.list for sid on the host's own Debian mirror (read
// from the host's apt sources at run time), signed by the Debian archive
// keyring, with its own package lists and apt cache. The host's apt
// sources, lists and cache are never touched.

// archiveKeyring verifies the sid lists (package debian-archive-keyring).
const archiveKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// sidListsMaxAge is how long downloaded sid lists are used before they are
// refreshed; a download that fails (the mirror dropped the version the
// lists name) refreshes them at once.
const sidListsMaxAge = 12 * time.Hour

// hostAptSources are where the host's Debian mirror is read from.
var hostAptSources = []string{"/etc/apt/sources.list.d/*.sources", "/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list"}

// aptEnv runs apt-get and apt-cache, with the host's configuration (no
// options) or a private one.
type aptEnv struct {
	opts []string // -o options placed before the command
	dir  string   // private apt directory ("" for the host's apt)
}

func (a aptEnv) command(tool string, args ...string) *exec.Cmd {
	return exec.Command(tool, append(append([]string{}, a.opts...), args...)...)
}

// debianMirror returns the URI of the host's Debian archive: the first
// "deb" source whose suites include a release suite (not -security,
// -updates, -backports), from deb822 .sources files or one-line .list
// files.
func debianMirror(patterns []string) (string, error) {
	var files []string
	for _, p := range patterns {
		m, _ := filepath.Glob(p)
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var uri string
		if strings.HasSuffix(f, ".sources") {
			uri = mirrorFromDeb822(string(b))
		} else {
			uri = mirrorFromOneLine(string(b))
		}
		if uri != "" {
			return uri, nil
		}
	}
	return "", fmt.Errorf("vmtest: no Debian archive (a deb source with a release suite) in %s", strings.Join(patterns, ", "))
}

// releaseSuite reports whether suite is a release (bookworm, sid,
// stable), not an update or security suite.
func releaseSuite(suite string) bool {
	for _, s := range []string{"-security", "-updates", "-backports", "-proposed-updates"} {
		if strings.HasSuffix(suite, s) {
			return false
		}
	}
	return suite != "" && !strings.Contains(suite, "/")
}

func mirrorFromDeb822(text string) string {
	for _, stanza := range strings.Split(text, "\n\n") {
		fields := map[string]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if !strings.Contains(" "+fields["types"]+" ", " deb ") || strings.EqualFold(fields["enabled"], "no") {
			continue
		}
		uris := strings.Fields(fields["uris"])
		if len(uris) == 0 {
			continue
		}
		for _, s := range strings.Fields(fields["suites"]) {
			if releaseSuite(s) {
				return strings.TrimSuffix(uris[0], "/")
			}
		}
	}
	return ""
}

func mirrorFromOneLine(text string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options: [signed-by=... arch=...]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) >= 2 && releaseSuite(f[1]) {
			return strings.TrimSuffix(f[0], "/")
		}
	}
	return ""
}

// sidApt returns the private apt environment for sid under cache/apt-sid,
// writing its sources.list (the host's mirror may change between runs).
func sidApt(cache string) (aptEnv, error) { return suiteApt(cache, "sid") }

// suiteApt returns the private apt environment for a Debian suite ("sid",
// "trixie") under cache/apt-<suite>, as sidApt does for sid.
func suiteApt(cache, suite string) (aptEnv, error) {
	dir := filepath.Join(cache, "apt-"+suite)
	if _, err := os.Stat(archiveKeyring); err != nil {
		return aptEnv{}, fmt.Errorf("vmtest: %s missing (apt-get install debian-archive-keyring, or bash scripts/setup-host.sh): %w", archiveKeyring, err)
	}
	mirror := os.Getenv("FABRAID_VMTEST_DEBIAN_MIRROR")
	if mirror == "" {
		var err error
		if mirror, err = debianMirror(hostAptSources); err != nil {
			return aptEnv{}, err
		}
	}
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return aptEnv{}, err
		}
	}
	src := filepath.Join(dir, "sources.list")
	line := fmt.Sprintf("deb [signed-by=%s] %s %s main\n", archiveKeyring, mirror, suite)
	if old, err := os.ReadFile(src); err != nil || string(old) != line {
		if err := os.WriteFile(src, []byte(line), 0o644); err != nil {
			return aptEnv{}, err
		}
		os.Remove(filepath.Join(dir, "lists", ".updated")) // another mirror: refresh
	}
	return aptEnv{dir: dir, opts: []string{
		"-o", "Dir::Etc::sourcelist=" + src,
		"-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "APT::Get::List-Cleanup=false",
		// Package lists only: no translations, no AppStream metadata.
		"-o", "Acquire::Languages=none",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false",
	}}, nil
}

// listsAge returns how long ago the private lists were last updated
// (a very large age when never).
func (a aptEnv) listsAge() time.Duration {
	st, err := os.Stat(filepath.Join(a.dir, "lists", ".updated"))
	if err != nil {
		return 1<<63 - 1
	}
	return time.Since(st.ModTime())
}

// update runs apt-get update on the private lists.
func (a aptEnv) update() error {
	out, err := a.command("apt-get", "-q", "update").CombinedOutput()
	if err != nil {
		return fmt.Errorf("vmtest: apt-get update (private lists in %s): %w\n%s", a.dir, err, out)
	}
	// apt-get update exits 0 when a source could not be fetched; then the
	// lists are not fresh.
	if strings.Contains(string(out), "\nW: Failed to fetch") || strings.Contains(string(out), "\nE: ") {
		return fmt.Errorf("vmtest: apt-get update (private lists in %s) failed:\n%s", a.dir, out)
	}
	return os.WriteFile(filepath.Join(a.dir, "lists", ".updated"), nil, 0o644)
}

// freshen updates the private lists when they are older than maxAge. A
// failed update is an error only when there are no lists at all.
func (a aptEnv) freshen(maxAge time.Duration) error {
	if a.listsAge() < maxAge {
		return nil
	}
	err := a.update()
	if err != nil {
		if m, _ := filepath.Glob(filepath.Join(a.dir, "lists", "*_Packages*")); len(m) > 0 {
			return nil // use the lists we have
		}
	}
	return err
}

// pkgnames lists the package names apt knows with prefix.
func (a aptEnv) pkgnames(prefix string) ([]string, error) {
	out, err := a.command("apt-cache", "pkgnames", prefix).Output()
	if err != nil {
		return nil, fmt.Errorf("vmtest: apt-cache pkgnames %s: %w", prefix, err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			names = append(names, l)
		}
	}
	return names, nil
}

// download fetches pkgs into dir with apt-get download and returns the
// .deb files.
func (a aptEnv) download(dir string, pkgs ...string) ([]string, error) {
	cmd := a.command("apt-get", append([]string{"-q", "download"}, pkgs...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("vmtest: apt-get download %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != len(pkgs) {
		return nil, fmt.Errorf("vmtest: apt-get download %s produced %d .deb files", strings.Join(pkgs, " "), len(debs))
	}
	return debs, nil
}

// splitKernelPackages names the packages that hold the kernel of a 7.x
// image package (linux-image-REL is an empty meta-package from 7.x on):
// linux-base-REL (config, modules.builtin), linux-modules-REL and the
// kernel image, linux-binary-REL or else linux-binary-unsigned-REL
// (both put it under usr/lib/modules/REL/).
func splitKernelPackages(imagePkg string, known []string) ([]string, error) {
	rel, ok := strings.CutPrefix(imagePkg, "linux-image-")
	if !ok {
		return nil, fmt.Errorf("vmtest: %s is not a linux-image package", imagePkg)
	}
	have := map[string]bool{}
	for _, n := range known {
		have[n] = true
	}
	pkgs := []string{"linux-base-" + rel, "linux-modules-" + rel}
	switch {
	case have["linux-binary-"+rel]:
		pkgs = append(pkgs, "linux-binary-"+rel)
	case have["linux-binary-unsigned-"+rel]:
		pkgs = append(pkgs, "linux-binary-unsigned-"+rel)
	default:
		return nil, fmt.Errorf("vmtest: neither linux-binary-%s nor linux-binary-unsigned-%s is known to apt", rel, rel)
	}
	for _, p := range pkgs[:2] {
		if !have[p] {
			return nil, fmt.Errorf("vmtest: %s is not known to apt (needed for %s)", p, imagePkg)
		}
	}
	return pkgs, nil
}

// fetchSplitKernel downloads and extracts the packages of a 7.x kernel
// into dir. When the download fails, the lists are refreshed once (the
// mirror may have dropped the version) and the caller picks again.
func fetchSplitKernel(a aptEnv, imagePkg, cache, dir string) error {
	rel := strings.TrimPrefix(imagePkg, "linux-image-")
	known, err := a.pkgnames("linux-")
	if err != nil {
		return err
	}
	var mine []string
	for _, n := range known {
		if strings.HasSuffix(n, rel) {
			mine = append(mine, n)
		}
	}
	pkgs, err := splitKernelPackages(imagePkg, mine)
	if err != nil {
		return err
	}
	dl, err := os.MkdirTemp(cache, "download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dl)
	debs, err := a.download(dl, pkgs...)
	if err != nil {
		return errors.Join(errDownload, err)
	}
	return extractDebs(debs, imagePkg, dir)
}

// errDownload marks a failed apt-get download (the lists may be stale).
var errDownload = errors.New("download failed")

// extractDebs unpacks debs with dpkg -x into dir (through dir.tmp) and
// marks it complete.
func extractDebs(debs []string, pkg, dir string) error {
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, d := range debs {
		if out, err := exec.Command("dpkg", "-x", d, tmp).CombinedOutput(); err != nil {
			return fmt.Errorf("vmtest: dpkg -x %s: %w\n%s", d, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(pkg+"\n"), 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}
