//go:build linux

package benchtools

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/vmtest"
)

// Guest paths of the Debian tools (fio, mdadm) and their libraries: run
// Bin+"/fio" with LD_LIBRARY_PATH=Lib.
const (
	Bin    = "/opt/bench/bin"
	Lib    = "/opt/bench/lib"
	loader = "/lib64/ld-linux-x86-64.so.2"
)

// toolStop are packages whose dependency closure is not followed: what
// installs and configures packages, interpreters the tools do not load.
var toolStop = map[string]bool{
	"debconf": true, "cdebconf": true, "dpkg": true, "adduser": true, "passwd": true, "install-info": true,
	"init-system-helpers": true, "usrmerge": true, "usr-is-merged": true, "tar": true, "lsb-base": true,
	"udev": true, "python3": true, "perl": true, "perl-base": true, "readline-common": true, "mailcap": true,
	"media-types": true, "mime-support": true, "dmsetup": true,
}

func stopped(pkg string) bool {
	return toolStop[pkg] || strings.HasPrefix(pkg, "python3") || strings.HasPrefix(pkg, "libpython") ||
		strings.HasPrefix(pkg, "perl") || strings.HasPrefix(pkg, "libperl") || strings.HasPrefix(pkg, "libpam") ||
		strings.HasPrefix(pkg, "libdebian-installer")
}

// closure lists roots and their Depends/Pre-Depends closure (apt's lists,
// first alternative of each entry), without the stop list.
func closure(roots []string) ([]string, error) {
	seen := map[string]bool{}
	queue := append([]string(nil), roots...)
	for len(queue) > 0 {
		batch := queue
		queue = nil
		out, err := exec.Command("apt-cache", append([]string{"show", "--no-all-versions"}, batch...)...).Output()
		if err != nil {
			return nil, fmt.Errorf("apt-cache show %s: %w", strings.Join(batch, " "), err)
		}
		for _, n := range batch {
			seen[n] = true
		}
		for _, line := range strings.Split(string(out), "\n") {
			k, v, ok := strings.Cut(line, ": ")
			if !ok || (k != "Depends" && k != "Pre-Depends") {
				continue
			}
			for _, entry := range strings.Split(v, ",") {
				first, _, _ := strings.Cut(entry, "|")
				name := strings.Fields(strings.TrimSpace(first))
				if len(name) == 0 {
					continue
				}
				n, _, _ := strings.Cut(name[0], ":")
				if !seen[n] && !stopped(n) && !contains(queue, n) {
					queue = append(queue, n)
				}
			}
		}
	}
	var list []string
	for n := range seen {
		list = append(list, n)
	}
	sort.Strings(list)
	return list, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// Files fetches fio and mdadm from Debian (apt-get download, dpkg-deb
// -x; cached in the vmtest cache) and returns the guest files (for
// vmtest.GuestConfig.Files): the two binaries, the shared libraries they
// load (DT_NEEDED closure) and the loader.
func Files(t testing.TB) map[string]string {
	t.Helper()
	cache, err := vmtest.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := closure([]string{"fio", "mdadm"})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(strings.Join(pkgs, "\n")))
	dir := filepath.Join(cache, "benchtools", hex.EncodeToString(h[:8]))
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		tmp := dir + ".tmp"
		os.RemoveAll(tmp)
		debs := filepath.Join(tmp, "debs")
		if err := os.MkdirAll(debs, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("apt-get", append([]string{"download", "-q"}, pkgs...)...)
		cmd.Dir = debs
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get download %s: %v\n%s", strings.Join(pkgs, " "), err, out)
		}
		ents, _ := os.ReadDir(debs)
		for _, e := range ents {
			if out, err := exec.Command("dpkg-deb", "-x", filepath.Join(debs, e.Name()), filepath.Join(tmp, "root")).CombinedOutput(); err != nil {
				t.Fatalf("dpkg-deb -x %s: %v\n%s", e.Name(), err, out)
			}
		}
		os.RemoveAll(debs)
		if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(strings.Join(pkgs, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
	}
	// Index every shared object in the tree by file name.
	libs := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(d.Name(), ".so") {
			if _, dup := libs[d.Name()]; !dup {
				libs[d.Name()] = p
			}
		}
		return nil
	})
	files := map[string]string{}
	var need []string
	for _, b := range []string{"usr/bin/fio", "sbin/mdadm"} {
		p := filepath.Join(root, b)
		if _, err := os.Stat(p); err != nil {
			p = filepath.Join(root, "usr", b)
		}
		files[Bin+"/"+filepath.Base(b)] = p
		need = append(need, p)
	}
	done := map[string]bool{}
	for len(need) > 0 {
		p := need[0]
		need = need[1:]
		f, err := elf.Open(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		imp, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, l := range imp {
			if done[l] {
				continue
			}
			done[l] = true
			src, ok := libs[l]
			if !ok {
				t.Fatalf("%s needs %s, which no package of the closure has", p, l)
			}
			real, err := filepath.EvalSymlinks(src)
			if err != nil {
				t.Fatal(err)
			}
			files[Lib+"/"+l] = real
			need = append(need, real)
		}
	}
	ld, ok := libs["ld-linux-x86-64.so.2"]
	if !ok {
		t.Fatal("no ld-linux-x86-64.so.2 in the tool packages")
	}
	real, err := filepath.EvalSymlinks(ld)
	if err != nil {
		t.Fatal(err)
	}
	files[loader] = real
	return files
}
