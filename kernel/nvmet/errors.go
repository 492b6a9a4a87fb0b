package nvmet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// ErrNotSupported is wrapped by errors for configfs attributes or objects
// the running kernel does not have (for example DH-HMAC-CHAP keys without
// NVME_TARGET_AUTH, addr_tsas before Linux 6.7).
var ErrNotSupported = errors.New("not supported by this kernel")

// ErrKeyClearBlocked is returned by Diff when a host's DH-HMAC-CHAP key
// must be removed but a foreign subsystem allows that host: configfs can
// clear a key only by recreating the host, which would cut the foreign
// subsystem's access. Remove the foreign link or keep a key.
var ErrKeyClearBlocked = errors.New("cannot clear the DH-HMAC-CHAP key: a foreign subsystem allows the host, and configfs clears a key only by recreating the host")

// Error is a failed configfs operation. It names the path (relative to
// the nvmet root) and, for writes, the value written (redacted for
// secrets). It unwraps to the errno, and Is reports os.ErrNotExist for
// ENOENT and os.ErrPermission for EPERM/EACCES.
type Error struct {
	Op    string // "mkdir", "rmdir", "write", "link", "unlink", "read"
	Path  string
	Value string
	Err   error
}

func (e *Error) Error() string {
	s := e.Op + " " + e.Path
	if e.Op == "write" {
		s += fmt.Sprintf(" = %q", e.Value)
	}
	s += ": " + e.Err.Error()
	if h := hint(e); h != "" {
		s += " (" + h + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func hint(e *Error) string {
	var errno syscall.Errno
	if !errors.As(e.Err, &errno) {
		return ""
	}
	base := path.Base(e.Path)
	switch {
	case e.Op == "write" && (base == "addr_tsas" || base == "addr_treq") && errno == syscall.EINVAL:
		return "TLS on nvmet ports needs a kernel with NVME_TARGET_TCP_TLS and the .nvme keyring: load nvme_keyring before the port is made; see dmesg"
	case errno == syscall.EACCES && e.Op == "write":
		return "port attributes change only while no subsystem is linked"
	case errno == syscall.EBUSY && e.Op == "write":
		return "namespace attributes change only while it is disabled"
	case errno == syscall.EINVAL && e.Op == "write":
		return "see dmesg for the nvmet message; serial, model and firmware are fixed once a host has connected"
	case errno == syscall.ENOENT && e.Op == "mkdir":
		return "is the nvmet module loaded and configfs mounted? try: modprobe nvmet"
	}
	return ""
}

// missingAttrHint names what a kernel lacks when a configfs attribute
// does not exist.
func missingAttrHint(attr string) string {
	switch {
	case attr == "addr_tsas" || attr == "addr_treq":
		return "TLS needs Linux 6.7 or later with NVME_TARGET_TCP_TLS"
	case strings.HasPrefix(attr, "dhchap_"):
		return "DH-HMAC-CHAP needs NVME_TARGET_AUTH"
	}
	return ""
}

func newError(op, path, value string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		err = se.Err
	}
	return &Error{Op: op, Path: path, Value: value, Err: err}
}
