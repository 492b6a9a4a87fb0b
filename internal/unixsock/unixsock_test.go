package unixsock

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestModeBeforeName checks the invariant that the socket's name never
// exists with a mode wider than asked: the hook runs right after bind,
// where a Listen-then-Chmod implementation exposes a 0777 socket (umask 0
// here makes that visible).
func TestModeBeforeName(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "api.sock")
	os.WriteFile(path, []byte("stale"), 0o644)
	var seen []os.FileMode
	check := func() {
		if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
			seen = append(seen, st.Mode().Perm())
		}
	}
	ln, err := listen(path, 0o600, hooks{afterBind: check})
	if err != nil {
		t.Fatal(err)
	}
	check()
	for _, m := range seen {
		if m != 0o600 {
			t.Errorf("socket %s existed with mode %v, want only 0600", path, m)
		}
	}
	if len(seen) == 0 {
		t.Fatalf("socket %s missing after Listen", path)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the renamed socket: %v", err)
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("read %q %v", b, err)
	}
	c.Close()
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket not removed on Close: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".sock-*"))
	if len(left) != 0 {
		t.Errorf("temporary directories left: %v", left)
	}
}

// TestChmodError: a failed chmod is an error and leaves no socket behind
// (the engine socket used to ignore it).
func TestChmodError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.sock")
	boom := errors.New("chmod refused")
	_, err := listen(path, 0o600, hooks{chmod: func(string, os.FileMode) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the chmod error", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket exists after a failed Listen: %v", err)
	}
}
