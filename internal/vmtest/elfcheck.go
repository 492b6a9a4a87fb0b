package vmtest

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// libSearchDirs is where the dynamic loader looks after RUNPATH when there
// is no ld.so.cache (the guest has none): Debian's multiarch and the
// plain library directories.
var libSearchDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib", "/lib64", "/usr/lib64",
}

// elfInfo is what the check needs from one ELF file.
type elfInfo struct {
	interp string   // PT_INTERP, "" for libraries and static binaries
	needed []string // DT_NEEDED
	dirs   []string // RUNPATH/RPATH ($ORIGIN expanded), then libSearchDirs
}

// checkELFClosure verifies that every dynamically linked ELF file in the
// tree root finds its program interpreter and each DT_NEEDED library
// inside the tree, as the loader would: for executables, their whole
// dependency tree, where a library loaded already satisfies later
// requests for its name (libsystemd-core finds libsystemd-shared through
// systemd's RUNPATH); libraries no executable loads are checked on their
// own, their directory counting as searched. The error lists every
// missing library with the file and package needing it; owners maps tree
// paths to packages.
func checkELFClosure(root string, owners map[string]string) error {
	infos := map[string]*elfInfo{} // guest path -> info
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := readELFInfo(root, "/"+filepath.ToSlash(rel))
		if info != nil {
			infos["/"+filepath.ToSlash(rel)] = info
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("vmtest: ELF check of %s: %w", root, err)
	}
	problems := map[string]bool{}
	report := func(file, what string) {
		who := file
		if pkg := owners[strings.TrimPrefix(file, "/")]; pkg != "" {
			who += " (package " + pkg + ")"
		}
		problems[fmt.Sprintf("%s needs %s, not in the guest tree", who, what)] = true
	}
	reached := map[string]bool{}
	for _, file := range sortedKeys(infos) {
		info := infos[file]
		if info.interp == "" {
			continue
		}
		if !existsInRoot(root, info.interp) {
			report(file, "interpreter "+info.interp)
		}
		loadTree(root, file, infos, reached, report)
	}
	for _, file := range sortedKeys(infos) {
		info := infos[file]
		if reached[file] || info.interp != "" {
			continue
		}
		dirs := append([]string{path.Dir(file)}, info.dirs...)
		for _, lib := range info.needed {
			if _, ok := findLib(root, lib, dirs); !ok {
				report(file, lib)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("vmtest: systemd guest tree is missing shared libraries (add the providing package to the closure or prune the file):\n  %s",
			strings.Join(sortedKeys(problems), "\n  "))
	}
	return nil
}

// loadTree follows the DT_NEEDED tree of the executable exe breadth first
// like the dynamic loader, marking every library it reaches.
func loadTree(root, exe string, infos map[string]*elfInfo, reached map[string]bool, report func(file, what string)) {
	loaded := map[string]bool{}
	queue := []string{exe}
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		info := infos[file]
		if info == nil {
			continue
		}
		for _, lib := range info.needed {
			if loaded[lib] {
				continue
			}
			found, ok := findLib(root, lib, info.dirs)
			if !ok {
				report(file, lib)
				continue
			}
			loaded[lib] = true
			reached[found] = true
			queue = append(queue, found)
		}
	}
}

// readELFInfo reads the interpreter, needed libraries and search path of
// the file at the guest path file; nil for files that are not ELF.
func readELFInfo(root, file string) (*elfInfo, error) {
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != elf.ELFMAG {
		return nil, nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	defer ef.Close()
	info := &elfInfo{dirs: runPaths(ef, path.Dir(file))}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return nil, fmt.Errorf("%s: interpreter: %w", file, err)
		}
		info.interp = strings.TrimRight(string(b), "\x00")
	}
	info.needed, err = ef.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("%s: DT_NEEDED: %w", file, err)
	}
	return info, nil
}

// runPaths returns the file's DT_RUNPATH (or DT_RPATH) directories with
// $ORIGIN expanded to origin, followed by libSearchDirs.
func runPaths(ef *elf.File, origin string) []string {
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := ef.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				d = strings.ReplaceAll(d, "${ORIGIN}", origin)
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", origin))
			}
		}
	}
	return append(dirs, libSearchDirs...)
}

// findLib looks lib up in dirs inside root and returns the resolved guest
// path of the library.
func findLib(root, lib string, dirs []string) (string, bool) {
	if strings.Contains(lib, "/") {
		return resolveInRoot(root, lib, 0)
	}
	for _, d := range dirs {
		if p, ok := resolveInRoot(root, path.Join(d, lib), 0); ok {
			return p, true
		}
	}
	return "", false
}

// existsInRoot reports whether the absolute guest path p exists in the
// tree root, resolving symbolic links (absolute ones relative to root) as
// the guest would.
func existsInRoot(root, p string) bool {
	_, ok := resolveInRoot(root, p, 0)
	return ok
}

// resolveInRoot resolves p component by component inside root and returns
// the final guest path.
func resolveInRoot(root, p string, depth int) (string, bool) {
	if depth > 40 {
		return "", false
	}
	cur := "/"
	parts := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	for i, part := range parts {
		if part == "" {
			continue
		}
		next := path.Join(cur, part)
		st, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", false
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				return "", false
			}
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			rest := path.Join(append([]string{target}, parts[i+1:]...)...)
			return resolveInRoot(root, rest, depth+1)
		}
		cur = next
	}
	return cur, true
}
