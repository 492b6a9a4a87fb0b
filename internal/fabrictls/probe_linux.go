package fabrictls

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// KernelKeys puts pair keys into the kernel's .nvme keyring
// (nvmetls.Insert: adds the key, or updates the one with its identity).
type KernelKeys struct{}

// Insert adds or updates d in .nvme.
func (KernelKeys) Insert(d nvmetls.Derived) error {
	_, err := nvmetls.Insert(0, d)
	return err
}

// Identities lists the descriptions of the live psk keys linked into
// the .nvme keyring (revoked ones stay listed in /proc/keys until
// collected). A kernel without /proc/keys has none.
func (KernelKeys) Identities() ([]string, error) {
	keys, err := nvmeKeys()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, k := range keys {
		ids = append(ids, k.Description)
	}
	return ids, nil
}

// Remove revokes each live psk key with the identity that is linked into
// the .nvme keyring: it stops matching the kernel's lookups at once
// (nvmetls.RevokePossessed). A key with the identity in any other keyring
// (a test's, an administrator's) is left alone.
func (KernelKeys) Remove(identity string) error {
	keys, err := nvmeKeys()
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.Description == identity {
			if err := nvmetls.RevokePossessed(0, k.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// nvmeKeys is the live psk keys of /proc/keys linked into the .nvme
// keyring; none when the kernel has no /proc/keys or no .nvme keyring.
func nvmeKeys() ([]nvmetls.ProcKey, error) {
	keys, err := nvmetls.ProcKeys()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ring := nvmetls.FindKey(keys, "keyring", nvmetls.KeyringName)
	if ring == 0 {
		return nil, nil
	}
	members, err := nvmetls.Members(ring)
	if err != nil {
		return nil, fmt.Errorf("list the %s keyring: %w", nvmetls.KeyringName, err)
	}
	return InKeyring(keys, members), nil
}

// TLSHDRunning says whether a process whose name is tlshd runs, from
// /proc/<pid>/comm under proc ("/proc").
func TLSHDRunning(proc string) bool {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(b)) == "tlshd" {
			return true
		}
	}
	return false
}

// keyring says whether the .nvme keyring exists.
func keyring() bool {
	_, err := nvmetls.Keyring()
	return err == nil
}

// HostSupport is the host side's support: /dev/nvme-fabrics lists the
// tls option, .nvme exists, tlshd runs.
func HostSupport(h *nvmf.Host) Support {
	opts, err := h.SupportedOptions()
	return Support{Kernel: err == nil && opts["tls"], Keyring: keyring(), TLSHD: TLSHDRunning("/proc")}
}

// TargetSupport is the target side's support; nvmetTLS is the target's
// feature probe (nvmet ports take addr_tsas tls1.3).
func TargetSupport(nvmetTLS bool) Support {
	return Support{Kernel: nvmetTLS, Keyring: keyring(), TLSHD: TLSHDRunning("/proc")}
}
