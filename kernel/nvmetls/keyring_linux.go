package nvmetls

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ErrNoKeyring is wrapped when the kernel has no .nvme keyring.
var ErrNoKeyring = errors.New("no .nvme keyring (load the nvme_keyring module; needs NVME_TCP_TLS or NVME_TARGET_TCP_TLS)")

// pskPerm lets the possessor everything and root processes that do not
// possess the key (tlshd, handed the serial by the kernel) view, read,
// search and link it.
const pskPerm = 0x3f1b0000

// ProcKeys reads the keys the caller can view from /proc/keys.
func ProcKeys() ([]ProcKey, error) {
	f, err := os.Open("/proc/keys")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseProcKeys(f)
}

// Keyring is the serial of the kernel's .nvme keyring, found in
// /proc/keys (root sees it: the keyring grants its owner, root, view).
func Keyring() (int, error) {
	keys, err := ProcKeys()
	if err != nil {
		return 0, fmt.Errorf("find %s keyring: %w", KeyringName, err)
	}
	if id := FindKey(keys, "keyring", KeyringName); id != 0 {
		return id, nil
	}
	return 0, ErrNoKeyring
}

// Members lists the serials of the keys linked into keyring (0: the
// .nvme keyring), read with KEYCTL_READ as its possessor (linked into the
// session keyring first, on one OS thread, as Insert does).
func Members(keyring int) ([]int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if keyring == 0 {
		var err error
		if keyring, err = Keyring(); err != nil {
			return nil, err
		}
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_LINK, keyring, unix.KEY_SPEC_SESSION_KEYRING, 0, 0); err != nil {
		return nil, fmt.Errorf("link keyring %d into the session keyring: %w", keyring, err)
	}
	buf := make([]byte, 4*64)
	for {
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, keyring, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("read keyring %d: %w", keyring, err)
		}
		if n <= len(buf) {
			return Serials(buf[:n]), nil
		}
		buf = make([]byte, n) // keys were linked since the size was asked
	}
}

// Insert adds (or, for an existing identity, updates) the derived key as
// a "psk" key in keyring and returns its serial. keyring 0 means the
// .nvme keyring.
func Insert(keyring int, d Derived) (int, error) {
	// Link, add and set permissions on one OS thread: a session keyring
	// the kernel makes on the link belongs to the calling thread only.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if keyring == 0 {
		var err error
		if keyring, err = Keyring(); err != nil {
			return 0, err
		}
	}
	// Possess the keyring (link it into the session keyring, as libnvme
	// does) so that the new key is possessed too and its permissions can
	// be set; root does not possess the kernel's .nvme keyring otherwise.
	if _, err := unix.KeyctlInt(unix.KEYCTL_LINK, keyring, unix.KEY_SPEC_SESSION_KEYRING, 0, 0); err != nil {
		return 0, fmt.Errorf("link keyring %d into the session keyring: %w", keyring, err)
	}
	id, err := unix.AddKey("psk", d.Identity, d.Key, keyring)
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return 0, fmt.Errorf("add psk %q: key type psk unknown (load nvme_keyring): %w", d.Identity, err)
		}
		return 0, fmt.Errorf("add psk %q to keyring %d: %w", d.Identity, keyring, err)
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_SETPERM, id, pskPerm, 0, 0); err != nil {
		return id, fmt.Errorf("set permissions of psk %q: %w", d.Identity, err)
	}
	return id, nil
}

// NewKeyring makes a keyring named name in the session keyring of the
// caller (so the caller and the children it starts, tlshd among them,
// possess it; it lives as long as that session keyring) and returns its
// serial: a place for keys that the .nvme keyring must not hold, named
// with the connect option keyring=.
func NewKeyring(name string) (int, error) {
	id, err := unix.AddKey("keyring", name, nil, unix.KEY_SPEC_SESSION_KEYRING)
	if err != nil {
		return 0, fmt.Errorf("add keyring %q: %w", name, err)
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_SETPERM, id, pskPerm, 0, 0); err != nil {
		return id, fmt.Errorf("set permissions of keyring %q: %w", name, err)
	}
	return id, nil
}

// RevokePossessed revokes the key id of keyring (0: the .nvme keyring)
// as its possessor: it links keyring into the session keyring first, on
// the same OS thread (a session keyring the kernel makes on that access
// belongs to the calling thread only), since only a possessor may revoke
// a key that Insert made.
func RevokePossessed(keyring, id int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if keyring == 0 {
		var err error
		if keyring, err = Keyring(); err != nil {
			return err
		}
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_LINK, keyring, unix.KEY_SPEC_SESSION_KEYRING, 0, 0); err != nil {
		return fmt.Errorf("link keyring %d into the session keyring: %w", keyring, err)
	}
	return Revoke(id)
}

// Revoke revokes the key or keyring id: it stops matching lookups at once
// and is garbage collected later.
func Revoke(id int) error {
	if _, err := unix.KeyctlInt(unix.KEYCTL_REVOKE, id, 0, 0, 0); err != nil {
		return fmt.Errorf("revoke key %d: %w", id, err)
	}
	return nil
}
