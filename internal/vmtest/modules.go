package vmtest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ulikunitz/xz"
)

// normModule turns a module or file name into the kernel's canonical module
// name: nvmet-tcp.ko.xz -> nvmet_tcp.
func normModule(name string) string {
	name = filepath.Base(name)
	for _, ext := range []string{".xz", ".zst", ".gz", ".ko"} {
		name = strings.TrimSuffix(name, ext)
	}
	return strings.ReplaceAll(name, "-", "_")
}

// moduleIndex maps canonical module names to their files and knows which
// modules are built into the kernel.
type moduleIndex struct {
	files   map[string]string
	builtin map[string]bool
}

func (k *Kernel) modules() (*moduleIndex, error) {
	idx := &moduleIndex{files: map[string]string{}, builtin: map[string]bool{}}
	err := filepath.WalkDir(filepath.Join(k.ModDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			idx.files[normModule(d.Name())] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("vmtest: index modules of %s: %w", k.Release, err)
	}
	if f, err := os.Open(filepath.Join(k.ModDir, "modules.builtin")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			idx.builtin[normModule(sc.Text())] = true
		}
		f.Close()
	}
	return idx, nil
}

// HasModule reports whether the kernel can provide a module, loadable or
// built in.
func (k *Kernel) HasModule(name string) bool {
	idx, err := k.modules()
	if err != nil {
		return false
	}
	n := normModule(name)
	return idx.files[n] != "" || idx.builtin[n]
}

// moduleObject returns the uncompressed .ko of a module, decompressing it
// into cacheDir once.
func (k *Kernel) moduleObject(idx *moduleIndex, name, cacheDir string) ([]byte, error) {
	src := idx.files[name]
	cached := filepath.Join(cacheDir, name+".ko")
	if b, err := os.ReadFile(cached); err == nil {
		return b, nil
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(src, ".xz"):
		xr, err := xz.NewReader(bufio.NewReader(f))
		if err != nil {
			return nil, fmt.Errorf("vmtest: decompress %s: %w", src, err)
		}
		r = xr
	case strings.HasSuffix(src, ".ko"):
	default:
		return nil, fmt.Errorf("vmtest: %s: unsupported module compression", src)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("vmtest: decompress %s: %w", src, err)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err == nil {
		tmp := cached + ".tmp"
		if os.WriteFile(tmp, b, 0o644) == nil {
			os.Rename(tmp, cached)
		}
	}
	return b, nil
}

// moduleDepends reads the depends= field of a module's .modinfo section.
func moduleDepends(ko []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return nil, err
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("no .modinfo section")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, normModule(d))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// loadedModule is one module of a resolved closure, in load order.
type loadedModule struct {
	Name   string
	Object []byte
}

// resolveModules returns the requested modules and their dependencies in an
// order that insmod can load them (dependencies first). Built-in modules are
// dropped. An unknown module is an error naming it and the kernel.
func (k *Kernel) resolveModules(names []string) ([]loadedModule, error) {
	idx, err := k.modules()
	if err != nil {
		return nil, err
	}
	// Decompressed modules are kept next to the extracted package(s).
	cache := filepath.Join(k.dir, "ko")
	if k.dir == "" {
		cache = filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(k.ModDir))), "ko")
	}
	var order []loadedModule
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, parent string) error
	visit = func(name, parent string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("vmtest: module dependency cycle at %s", name)
		case 2:
			return nil
		}
		if idx.builtin[name] && idx.files[name] == "" {
			state[name] = 2
			return nil
		}
		if idx.files[name] == "" {
			what := fmt.Sprintf("module %s", name)
			if parent != "" {
				what += fmt.Sprintf(" (needed by %s)", parent)
			}
			return fmt.Errorf("vmtest: %s not found in kernel %s (package %s)", what, k.Release, k.Package)
		}
		state[name] = 1
		ko, err := k.moduleObject(idx, name, cache)
		if err != nil {
			return err
		}
		deps, err := moduleDepends(ko)
		if err != nil {
			return fmt.Errorf("vmtest: module %s: %w", name, err)
		}
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, loadedModule{Name: name, Object: ko})
		return nil
	}
	for _, n := range names {
		if err := visit(normModule(n), ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}
