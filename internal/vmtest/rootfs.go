package vmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// systemdRoots are the packages a systemd guest is built from; their
// Depends/Pre-Depends closure (minus debStopList) is fetched.
var systemdRoots = []string{"systemd", "dbus"}

// udevRoots are added to systemdRoots for GuestConfig.Udev guests: a
// separate tree (its own cache key), so plain systemd guests are unchanged.
var udevRoots = []string{"udev"}

// rootfsLayout versions the way an extracted tree is merged and pruned;
// bump it when that changes so cached trees are rebuilt.
const rootfsLayout = "2"

// sysRoot is an extracted, usr-merged and pruned tree of Debian packages,
// cached under <cache>/rootfs/<key>/root.
type sysRoot struct {
	Dir      string   // the tree; bin, sbin, lib, lib64 are symlinks into usr
	Packages []string // name=version, sorted
}

// usrMergedDirs are the top-level directories that are symlinks into /usr
// in a merged tree.
var usrMergedDirs = []string{"bin", "sbin", "lib", "lib64"}

// prunedPaths are left out of the tree (prefixes of usr-merged relative
// paths): documentation, translations, shell completions and glibc's
// charset converters, none needed to boot or by the tests.
var prunedPaths = []string{
	"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
	"usr/share/lintian", "usr/share/bash-completion", "usr/share/zsh",
	"usr/share/bug", "usr/share/doc-base", "usr/share/gcc", "usr/share/gdb",
	"usr/lib/x86_64-linux-gnu/gconv", "usr/share/polkit-1",
}

// usrMerge maps a package path ("lib/systemd/systemd") to its place in a
// merged tree ("usr/lib/systemd/systemd").
func usrMerge(rel string) string {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	first, _, _ := strings.Cut(rel, "/")
	for _, d := range usrMergedDirs {
		if first == d {
			return "usr/" + rel
		}
	}
	return rel
}

// pruned reports whether the merged path is left out.
func pruned(rel string) bool {
	for _, p := range prunedPaths {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// rootfsKey names a tree by its package versions and the layout version.
func rootfsKey(pkgs []debPackage) (key string, list []string) {
	for _, p := range pkgs {
		list = append(list, p.Name+"="+p.Version)
	}
	sort.Strings(list)
	h := sha256.Sum256([]byte("layout " + rootfsLayout + "\n" + strings.Join(list, "\n")))
	return hex.EncodeToString(h[:8]), list
}

// aptStateFiles are the files whose change can change apt's candidate
// versions: the package lists and the pinning preferences.
var aptStateFiles = []string{
	"/var/lib/apt/lists/*_Packages*", "/etc/apt/preferences", "/etc/apt/preferences.d/*",
}

// aptStamp hashes the names, sizes and modification times of the files
// matching globs; "" when none exists. Asking apt-cache for the closure
// takes seconds, so a tree is reused without asking while this is the same.
func aptStamp(globs []string) string {
	h := sha256.New()
	n := 0
	for _, g := range globs {
		matches, _ := filepath.Glob(g)
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil {
				fmt.Fprintf(h, "%s %d %d\n", m, st.Size(), st.ModTime().UnixNano())
				n++
			}
		}
	}
	if n == 0 {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// getSystemdRoot returns the cached tree of systemd, dbus (and udev when
// withUdev) and their library closure, fetching it with apt-get download
// and dpkg-deb on first use. The closure is resolved again only when apt's
// lists changed. When apt's lists cannot be read the newest cached tree of
// the same kind is used.
func getSystemdRoot(withUdev bool) (*sysRoot, error) {
	cache, unlock, err := lockedCache("rootfs")
	if err != nil {
		return nil, err
	}
	defer unlock()
	base := filepath.Join(cache, "rootfs")
	stampFile := ""
	if stamp := aptStamp(aptStateFiles); stamp != "" {
		stampFile = filepath.Join(base, "apt-"+rootfsLayout+"-"+stamp)
		if withUdev {
			stampFile += "-udev"
		}
		if key, err := os.ReadFile(stampFile); err == nil {
			if r, err := cachedRoot(base, strings.TrimSpace(string(key))); err == nil {
				return r, nil
			}
		}
	}
	roots := systemdRoots
	if withUdev {
		roots = append(append([]string{}, systemdRoots...), udevRoots...)
	}
	pkgs, err := resolveClosure(roots, debStopList, aptCacheShow)
	if err != nil {
		if r, cerr := newestCachedRoot(base, withUdev); cerr == nil {
			return r, nil
		}
		return nil, fmt.Errorf("vmtest: systemd guest packages: %w", err)
	}
	key, list := rootfsKey(pkgs)
	if _, err := cachedRoot(base, key); err != nil {
		if err := buildTree(aptEnv{}, filepath.Join(base, key), list, checkSystemdTree); err != nil {
			return nil, err
		}
	}
	if stampFile != "" {
		os.WriteFile(stampFile, []byte(key+"\n"), 0o644)
	}
	return cachedRoot(base, key)
}

// hasPackage reports whether the tree contains package name.
func (r *sysRoot) hasPackage(name string) bool {
	for _, p := range r.Packages {
		if n, _, _ := strings.Cut(p, "="); n == name {
			return true
		}
	}
	return false
}

// cachedRoot returns the complete tree named key.
func cachedRoot(base, key string) (*sysRoot, error) {
	b, err := os.ReadFile(filepath.Join(base, key, ".complete"))
	if err != nil {
		return nil, err
	}
	return &sysRoot{Dir: filepath.Join(base, key, "root"), Packages: strings.Fields(string(b))}, nil
}

// newestCachedRoot finds the most recently built complete tree with (or
// without) the udev package.
func newestCachedRoot(base string, withUdev bool) (*sysRoot, error) {
	entries, _ := os.ReadDir(base)
	var best string
	var bestTime time.Time
	for _, e := range entries {
		st, err := os.Stat(filepath.Join(base, e.Name(), ".complete"))
		if err != nil {
			continue
		}
		if r, err := cachedRoot(base, e.Name()); err != nil || r.hasPackage("udev") != withUdev {
			continue
		}
		if st.ModTime().After(bestTime) {
			best, bestTime = e.Name(), st.ModTime()
		}
	}
	if best == "" {
		return nil, errors.New("vmtest: no cached systemd tree")
	}
	return cachedRoot(base, best)
}

// buildTree downloads the packages (name=version) through a, extracts
// each, merges them into dir/root, runs check on the tree (when not nil)
// and marks dir complete.
func buildTree(a aptEnv, dir string, list []string, check func(root string, owners map[string]string, tmp string) error) error {
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	debs := filepath.Join(tmp, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := a.download(debs, list...); err != nil {
		return err
	}
	root, owners, err := mergeDebs(tmp, debs, list)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(root, owners, tmp); err != nil {
			return err
		}
	}
	return finishRoot(tmp, dir, list)
}

// checkSystemdTree checks a systemd guest's tree (required files, ELF
// closure) and records the file owners in tmp.
func checkSystemdTree(root string, owners map[string]string, tmp string) error {
	if err := checkRequired(root); err != nil {
		return err
	}
	if err := checkELFClosure(root, owners); err != nil {
		return err
	}
	return writeOwners(filepath.Join(tmp, "owners"), owners)
}

// mergeDebs extracts the downloaded packages (name=version, .deb files in
// debs) under tmp/x and merges them into the usr-merged tree tmp/root; it
// returns the tree and which package each path came from.
func mergeDebs(tmp, debs string, list []string) (string, map[string]string, error) {
	root := filepath.Join(tmp, "root")
	owners := map[string]string{}
	for _, nv := range list {
		name, _, _ := strings.Cut(nv, "=")
		deb, err := findDeb(debs, name)
		if err != nil {
			return "", nil, err
		}
		x := filepath.Join(tmp, "x", name)
		if err := os.MkdirAll(x, 0o755); err != nil {
			return "", nil, err
		}
		if out, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("vmtest: dpkg-deb -x %s: %w\n%s", deb, err, out)
		}
		if err := mergeTree(x, root, name, owners); err != nil {
			return "", nil, fmt.Errorf("vmtest: merge package %s: %w", name, err)
		}
	}
	for _, d := range usrMergedDirs {
		if err := os.MkdirAll(filepath.Join(root, "usr", d), 0o755); err != nil {
			return "", nil, err
		}
		if err := os.Symlink("usr/"+d, filepath.Join(root, d)); err != nil {
			return "", nil, err
		}
	}
	return root, owners, nil
}

// finishRoot marks the tree in tmp complete, drops what only building it
// needed and moves it to dir.
func finishRoot(tmp, dir string, list []string) error {
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(strings.Join(list, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	os.RemoveAll(filepath.Join(tmp, "x"))
	os.RemoveAll(filepath.Join(tmp, "debs"))
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// requiredFiles must be in a systemd guest's tree (guest paths): what /init
// execs, the loader, the tools tests and units use, and util-linux's mount
// and umount, which busybox's applet links must not replace.
var requiredFiles = []string{
	"/lib/systemd/systemd", "/lib64/ld-linux-x86-64.so.2", "/usr/lib/systemd/systemd-journald",
	"/usr/bin/dbus-daemon", "/usr/share/dbus-1/system.conf", "/usr/bin/dbus-send",
	"/usr/bin/systemctl", "/usr/bin/journalctl", "/usr/bin/busctl", "/usr/bin/systemd-cat",
	"/usr/bin/systemd-run", "/usr/bin/mount", "/usr/bin/umount",
	"/usr/lib/systemd/system/basic.target", "/usr/lib/systemd/system/dbus.socket",
}

// checkRequired fails naming every required file the tree lacks.
func checkRequired(root string) error {
	var missing []string
	for _, f := range requiredFiles {
		if !existsInRoot(root, f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("vmtest: systemd guest tree (packages %s and their closure) lacks %s",
			strings.Join(systemdRoots, ", "), strings.Join(missing, ", "))
	}
	return nil
}

// findDeb finds the one downloaded .deb of a package.
func findDeb(dir, name string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(dir, name+"_*.deb"))
	if len(m) != 1 {
		return "", fmt.Errorf("vmtest: apt-get download left %d .deb files for %s", len(m), name)
	}
	return m[0], nil
}

// mergeTree moves the extracted package tree src into root at usr-merged
// paths, leaving out pruned paths. Symbolic links are re-pointed so that
// they resolve to the same (merged) place. owners records which package
// each path came from.
func mergeTree(src, root, pkg string, owners map[string]string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		merged := usrMerge(rel)
		if pruned(merged) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(root, merged)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			os.Remove(dst)
			owners[merged] = pkg
			return os.Symlink(mergedLinkTarget(rel, target), dst)
		case d.Type().IsRegular():
			owners[merged] = pkg
			return os.Rename(p, dst)
		}
		return nil // device nodes, fifos: none in these packages
	})
}

// mergedLinkTarget re-points a link at rel (package path) with target so
// it resolves in the merged tree to where it resolved in the package.
func mergedLinkTarget(rel, target string) string {
	if path.IsAbs(target) {
		return "/" + usrMerge(target)
	}
	abs := path.Join("/", path.Dir(rel), target)
	to := "/" + usrMerge(abs)
	from := "/" + path.Dir(usrMerge(rel))
	if r, err := filepath.Rel(from, to); err == nil {
		return filepath.ToSlash(r)
	}
	return to
}

func writeOwners(p string, owners map[string]string) error {
	var b strings.Builder
	for _, k := range sortedKeys(owners) {
		fmt.Fprintf(&b, "%s\t%s\n", k, owners[k])
	}
	return os.WriteFile(p, []byte(b.String()), 0o644)
}
