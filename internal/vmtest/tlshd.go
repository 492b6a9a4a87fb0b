package vmtest

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// tlshd (package ktls-utils) runs the TLS handshakes of NVMe/TCP (and NFS)
// for the kernel. Debian 12 has no ktls-utils; trixie's 1.0.0 is the
// version that fits the 6.12 kernels. It is fetched with a private apt
// configuration for trixie (like sid's kernels, see sidApt), with the
// Depends closure of ktls-utils, and only tlshd, the program interpreter
// and the libraries tlshd loads go into a plain guest: trixie's glibc and
// libraries travel with it and never meet Debian 12's.

// TLSHDSuite is the Debian suite tlshd comes from.
const TLSHDSuite = "trixie"

// TLSHDLibDir is the guest directory that holds tlshd's libraries; start
// tlshd with LD_LIBRARY_PATH set to it.
const TLSHDLibDir = "/usr/lib/x86_64-linux-gnu"

// TLSHDPath is tlshd's guest path.
const TLSHDPath = "/usr/sbin/tlshd"

// TLSHD returns the files a plain guest needs to run tlshd, for
// GuestConfig.Files: tlshd, its program interpreter and every shared
// library it loads (under TLSHDLibDir by soname). They are fetched and
// extracted on first use into the cache (tlshd/<key>, about 20 MB). The
// test fails when they cannot be fetched. In the guest, and when VM tests
// are off, it returns nil and fetches nothing.
func TLSHD(t testing.TB) map[string]string {
	t.Helper()
	if InGuest() || !Enabled() {
		return nil
	}
	files, err := tlshdFiles()
	if err != nil {
		t.Fatalf("vmtest: tlshd for the guest: %v", err)
	}
	return files
}

func tlshdFiles() (map[string]string, error) {
	cache, unlock, err := lockedCache("tlshd")
	if err != nil {
		return nil, err
	}
	defer unlock()
	base := filepath.Join(cache, "tlshd")
	a, err := suiteApt(cache, TLSHDSuite)
	if err != nil {
		return nil, err
	}
	var root string
	if err := a.freshen(7 * 24 * time.Hour); err == nil {
		pkgs, err := resolveClosure([]string{"ktls-utils"}, debStopList, a.show)
		if err != nil {
			return nil, err
		}
		key, list := rootfsKey(pkgs)
		root = filepath.Join(base, key, "root")
		if _, err := os.Stat(filepath.Join(base, key, ".complete")); err != nil {
			if err := buildTree(a, filepath.Join(base, key), list, nil); err != nil {
				return nil, err
			}
		}
	} else if root = newestComplete(base); root == "" {
		return nil, err
	}
	return elfFiles(root, TLSHDPath, TLSHDLibDir)
}

// newestComplete returns the root of the newest complete tree under base,
// "" when there is none.
func newestComplete(base string) string {
	marks, _ := filepath.Glob(filepath.Join(base, "*", ".complete"))
	best, bestTime := "", time.Time{}
	for _, m := range marks {
		if st, err := os.Stat(m); err == nil && st.ModTime().After(bestTime) {
			best, bestTime = filepath.Join(filepath.Dir(m), "root"), st.ModTime()
		}
	}
	return best
}

// show is aptCacheShow through the private configuration.
func (a aptEnv) show(names []string) (map[string]debPackage, error) {
	out, err := a.command("apt-cache", append([]string{"show", "--no-all-versions"}, names...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("vmtest: apt-cache show %s (lists in %s): %w", strings.Join(names, " "), a.dir, err)
	}
	return parseAptShow(out), nil
}

// elfFiles returns guest path -> host path for the executable exe of the
// tree root, its program interpreter (at the path the executable names)
// and every library of its DT_NEEDED tree, placed under libDir by the name
// the loader looks for. A library the tree lacks is an error naming it.
func elfFiles(root, exe, libDir string) (map[string]string, error) {
	host := func(guest string) (string, error) {
		resolved, ok := resolveInRoot(root, guest, 0)
		if !ok {
			return "", fmt.Errorf("vmtest: %s is not in %s", guest, root)
		}
		return filepath.Join(root, resolved), nil
	}
	files := map[string]string{}
	exeHost, err := host(exe)
	if err != nil {
		return nil, err
	}
	files[exe] = exeHost
	info, err := readELFInfo(root, exe)
	if err != nil || info == nil || info.interp == "" {
		return nil, fmt.Errorf("vmtest: %s is not a dynamically linked executable (%v)", exe, err)
	}
	if files[info.interp], err = host(info.interp); err != nil {
		return nil, err
	}
	var missing []string
	queue := []*elfInfo{info}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, lib := range cur.needed {
			guest := path.Join(libDir, path.Base(lib))
			if _, done := files[guest]; done {
				continue
			}
			found, ok := findLib(root, lib, cur.dirs)
			if !ok {
				missing = append(missing, lib)
				continue
			}
			files[guest] = filepath.Join(root, found)
			next, err := readELFInfo(root, found)
			if err != nil {
				return nil, err
			}
			if next != nil {
				queue = append(queue, next)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("vmtest: %s needs %s, not in %s", exe, strings.Join(missing, ", "), root)
	}
	return files, nil
}
