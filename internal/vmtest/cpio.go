package vmtest

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// cpioWriter writes a newc ("070701") cpio archive, the format the kernel
// unpacks as an initramfs. Parent directories are created implicitly.
type cpioWriter struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, ino: 1, dirs: map[string]bool{"": true, ".": true, "/": true}}
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

func (c *cpioWriter) header(name string, mode uint32, size int) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	_, c.err = io.WriteString(c.w, hdr+name+"\x00")
	c.pad(len(hdr) + len(name) + 1)
}

func (c *cpioWriter) pad(n int) {
	if c.err == nil && n%4 != 0 {
		_, c.err = c.w.Write(make([]byte, 4-n%4))
	}
}

func (c *cpioWriter) mkdirAll(dir string) {
	dir = strings.TrimPrefix(path.Clean("/"+dir), "/")
	if c.dirs[dir] {
		return
	}
	c.mkdirAll(path.Dir(dir))
	c.dirs[dir] = true
	c.header(dir, modeDir|0o755, 0)
}

// File adds a regular file with its parents.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	c.mkdirAll(path.Dir(name))
	c.header(name, modeFile|perm, len(data))
	if c.err == nil {
		_, c.err = c.w.Write(data)
	}
	c.pad(len(data))
}

// Symlink adds a symbolic link name -> target. A later path under name is
// written through the link (no directory is created over it), which is
// how a usr-merged tree's /bin -> usr/bin works.
func (c *cpioWriter) Symlink(name, target string) {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	c.mkdirAll(path.Dir(name))
	c.dirs[name] = true
	c.header(name, modeLink|0o777, len(target))
	if c.err == nil {
		_, c.err = io.WriteString(c.w, target)
	}
	c.pad(len(target))
}

// Dir adds an empty directory.
func (c *cpioWriter) Dir(name string) { c.mkdirAll(name) }

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	c.header("TRAILER!!!", 0, 0)
	return c.err
}

// sortedKeys returns the keys of m in order, for reproducible archives.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
