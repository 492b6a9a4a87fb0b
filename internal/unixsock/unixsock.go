// Package unixsock listens on unix sockets that are never reachable with
// a wider mode than asked for.
//
// # Why not Listen then Chmod
//
// bind(2) creates the socket file with mode 0777 &^ umask. A socket that is
// chmod-ed after net.Listen is open to every local user between the two
// calls (and forever, if the chmod error is ignored). Listen binds inside a
// fresh 0700 directory next to the final path, where nobody else can reach
// the file, sets the mode there, and only then renames the socket to its
// final name: rename(2) is atomic, so the name appears with its final mode
// or not at all. No process-wide umask is touched (that would race with
// every other goroutine creating files).
package unixsock

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// hooks lets tests stop between the steps of listen.
type hooks struct {
	afterBind func()                                 // after bind, before chmod and rename
	chmod     func(name string, m os.FileMode) error // os.Chmod unless set
}

// Listen removes a stale file at path, then listens on the unix socket
// path with permission bits mode. The returned listener removes path when
// closed. path's directory must be writable; a ".sock-*" directory is made
// in it for a moment.
func Listen(path string, mode os.FileMode) (net.Listener, error) {
	return listen(path, mode, hooks{})
}

func listen(path string, mode os.FileMode, h hooks) (net.Listener, error) {
	if h.chmod == nil {
		h.chmod = os.Chmod
	}
	dir := filepath.Dir(path)
	tmpDir, err := os.MkdirTemp(dir, ".sock-")
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	defer os.RemoveAll(tmpDir)
	if err := os.Chmod(tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	tmp := filepath.Join(tmpDir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	// tmp is renamed away below; the wrapper unlinks the final name.
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if h.afterBind != nil {
		h.afterBind()
	}
	if err := h.chmod(tmp, mode); err != nil {
		return fail(err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return &listener{UnixListener: ln, path: path}, nil
}

// listener unlinks path on Close (net.UnixListener would unlink only the
// name it was bound to, which the rename moved away).
type listener struct {
	*net.UnixListener
	path string
}

func (l *listener) Close() error {
	err := l.UnixListener.Close()
	os.Remove(l.path)
	return err
}
