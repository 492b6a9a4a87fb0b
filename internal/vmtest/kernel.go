package vmtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Kernel7 is Debian sid's newest 7.x kernel (linux-image-7.*+deb*-amd64;
// 7.2.13+deb14-amd64 in December 2026), fetched with a private apt
// configuration for sid (the host's apt sources stay as they are). It has
// the ublk features 6.12 lacks (AUTO_BUF_REG, UPDATE_SIZE, QUIESCE, ...);
// see docs/testing.md.
const Kernel7 = "7"

// Kernel is an extracted Debian kernel package.
type Kernel struct {
	Series  string // Kernel612, Kernel61, Kernel7
	Package string // Debian package name
	Release string // uname -r, e.g. 6.12.117+deb12-amd64
	Vmlinuz string // path to the bzImage
	ModDir  string // lib/modules/<release> (usr/lib/modules/<release> from 7.x)
	dir     string // the extracted package(s)
	config  map[string]string
}

// packagePattern matches the package names of each series: the generic
// amd64 flavour only (not cloud, rt).
var packagePattern = map[string]*regexp.Regexp{
	Kernel612: regexp.MustCompile(`^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64-unsigned$`),
	Kernel61:  regexp.MustCompile(`^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$`),
	// From 7.x the image package is an empty meta-package over
	// linux-binary, linux-modules and linux-base (splitKernelPackages).
	Kernel7: regexp.MustCompile(`^linux-image-7\.[0-9]+\.[0-9]+\+deb[0-9]+-amd64$`),
}

// CacheDir returns the directory where kernels and built artifacts are
// cached: $FABRAID_VMTEST_CACHE, else <module root>/.cache/vmtest.
func CacheDir() (string, error) {
	if d := os.Getenv("FABRAID_VMTEST_CACHE"); d != "" {
		return d, os.MkdirAll(d, 0o755)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			d := filepath.Join(dir, ".cache", "vmtest")
			return d, os.MkdirAll(d, 0o755)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("vmtest: no go.mod above the working directory; set FABRAID_VMTEST_CACHE")
		}
		dir = parent
	}
}

// compareVersions orders dotted/dashed version strings numerically where
// both sides are numbers ("6.12.117" > "6.12.99"), lexically otherwise.
func compareVersions(a, b string) int {
	split := func(s string) []string {
		return regexp.MustCompile(`[0-9]+|[^0-9]+`).FindAllString(s, -1)
	}
	pa, pb := split(a), split(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.ParseUint(pa[i], 10, 64)
		nb, eb := strconv.ParseUint(pb[i], 10, 64)
		switch {
		case ea == nil && eb == nil && na != nb:
			if na < nb {
				return -1
			}
			return 1
		case (ea != nil || eb != nil) && pa[i] != pb[i]:
			return strings.Compare(pa[i], pb[i])
		}
	}
	return len(pa) - len(pb)
}

// newestPackage picks the newest package of a series from names.
func newestPackage(series string, names []string) (string, error) {
	re, ok := packagePattern[series]
	if !ok {
		return "", fmt.Errorf("vmtest: unknown kernel series %q (want %s, %s or %s)", series, Kernel612, Kernel61, Kernel7)
	}
	var match []string
	for _, n := range names {
		if re.MatchString(n) {
			match = append(match, n)
		}
	}
	if len(match) == 0 {
		return "", fmt.Errorf("vmtest: no package matching %s known to apt (run apt-get update?)", re)
	}
	sort.Slice(match, func(i, j int) bool { return compareVersions(match[i], match[j]) < 0 })
	return match[len(match)-1], nil
}

// aptPackages lists the candidate package names of a series from apt's lists.
func aptPackages(a aptEnv, series string) ([]string, error) {
	prefix := "linux-image-" + series
	if series == Kernel7 {
		prefix = "linux-image-7."
	}
	return a.pkgnames(prefix)
}

// GetKernel returns the newest kernel of a series, downloading and
// extracting it into the cache on first use. When apt cannot be asked (no
// network, no lists) the newest kernel already in the cache is used.
func GetKernel(series string) (*Kernel, error) {
	cache, unlock, err := lockedCache("kernels")
	if err != nil {
		return nil, err
	}
	defer unlock()

	kdir := filepath.Join(cache, "kernels")
	if _, ok := packagePattern[series]; !ok {
		_, err := newestPackage(series, nil)
		return nil, err
	}
	var apt aptEnv // the host's apt for 6.x
	var aptErr error
	if series == Kernel7 {
		if apt, aptErr = sidApt(cache); aptErr == nil {
			aptErr = apt.freshen(sidListsMaxAge)
		}
	}
	var names []string
	if aptErr == nil {
		names, aptErr = aptPackages(apt, series)
	}
	pkg, pickErr := newestPackage(series, names)
	if aptErr != nil || pickErr != nil {
		cached, _ := os.ReadDir(kdir)
		var have []string
		for _, e := range cached {
			have = append(have, e.Name())
		}
		if p, err := newestPackage(series, have); err == nil {
			return loadKernel(series, p, filepath.Join(kdir, p))
		}
		return nil, fmt.Errorf("vmtest: kernel %s: %w", series, errors.Join(aptErr, pickErr))
	}
	dir := filepath.Join(kdir, pkg)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return loadKernel(series, pkg, dir)
	}
	if series != Kernel7 {
		if err := fetchPackage(pkg, cache, dir); err != nil {
			return nil, err
		}
		return loadKernel(series, pkg, dir)
	}
	err = fetchSplitKernel(apt, pkg, cache, dir)
	if errors.Is(err, errDownload) && apt.listsAge() > time.Minute {
		// The lists may name a version the mirror no longer has: refresh
		// them and pick again.
		if uerr := apt.update(); uerr != nil {
			return nil, errors.Join(err, uerr)
		}
		if names, err = aptPackages(apt, series); err != nil {
			return nil, err
		}
		if pkg, err = newestPackage(series, names); err != nil {
			return nil, err
		}
		dir = filepath.Join(kdir, pkg)
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr == nil {
			return loadKernel(series, pkg, dir)
		}
		err = fetchSplitKernel(apt, pkg, cache, dir)
	}
	if err != nil {
		return nil, err
	}
	return loadKernel(series, pkg, dir)
}

// fetchPackage downloads pkg with apt-get download and extracts it with dpkg -x.
func fetchPackage(pkg, cache, dir string) error {
	dl, err := os.MkdirTemp(cache, "download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dl)
	cmd := exec.Command("apt-get", "download", pkg)
	cmd.Dir = dl
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("vmtest: apt-get download %s: %w\n%s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("vmtest: apt-get download %s produced %d .deb files", pkg, len(debs))
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("dpkg", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("vmtest: dpkg -x %s: %w\n%s", debs[0], err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(pkg+"\n"), 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// loadKernel reads an extracted kernel: the 6.x layout (boot/vmlinuz-REL,
// boot/config-REL, lib/modules/REL) or the 7.x one, where everything is
// under usr/lib/modules/REL (vmlinuz, or vmlinuz.unsigned from
// linux-binary-unsigned; config; modules.builtin).
func loadKernel(series, pkg, dir string) (*Kernel, error) {
	k := &Kernel{Series: series, Package: pkg, dir: dir}
	var configPath string
	if vmlinuz, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*")); len(vmlinuz) == 1 {
		k.Release = strings.TrimPrefix(filepath.Base(vmlinuz[0]), "vmlinuz-")
		k.Vmlinuz = vmlinuz[0]
		k.ModDir = filepath.Join(dir, "lib", "modules", k.Release)
		configPath = filepath.Join(dir, "boot", "config-"+k.Release)
	} else {
		var found []string
		for _, name := range []string{"vmlinuz", "vmlinuz.unsigned"} {
			m, _ := filepath.Glob(filepath.Join(dir, "usr", "lib", "modules", "*", name))
			found = append(found, m...)
		}
		if len(found) != 1 {
			return nil, fmt.Errorf("vmtest: %s: expected one boot/vmlinuz-* or usr/lib/modules/*/vmlinuz in %s, found %d", pkg, dir, len(found))
		}
		k.Vmlinuz = found[0]
		k.ModDir = filepath.Dir(found[0])
		k.Release = filepath.Base(k.ModDir)
		configPath = filepath.Join(k.ModDir, "config")
	}
	cfg, err := readKernelConfig(configPath)
	if err != nil {
		return nil, fmt.Errorf("vmtest: %s: %w", pkg, err)
	}
	k.config = cfg
	return k, nil
}

func readKernelConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "CONFIG_") {
			if k, v, ok := strings.Cut(line, "="); ok {
				cfg[k] = v
			}
		}
	}
	return cfg, sc.Err()
}

// Config returns the value of a kernel config option ("y", "m", a string)
// or "" when it is not set.
func (k *Kernel) Config(option string) string { return k.config[option] }

// lockedCache returns the cache directory with the lock <name>.lock in it
// held, and the lock's release.
func lockedCache(name string) (string, func(), error) {
	cache, err := CacheDir()
	if err != nil {
		return "", nil, err
	}
	unlock, err := lockFile(filepath.Join(cache, name+".lock"))
	if err != nil {
		return "", nil, err
	}
	return cache, unlock, nil
}

// lockFile takes an exclusive flock on path and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("vmtest: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// tryLockFile takes an exclusive flock on path if it is free right now.
func tryLockFile(path string) (func(), bool) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}
