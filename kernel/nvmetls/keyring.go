package nvmetls

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// KeyringName is the description of the kernel's NVMe keyring, made by
// the nvme-keyring module (NVME_KEYRING, selected by NVME_TCP_TLS and
// NVME_TARGET_TCP_TLS).
const KeyringName = ".nvme"

// ProcKey is one line of /proc/keys.
type ProcKey struct {
	ID          int // serial
	Flags       string
	Type        string
	Description string
}

// Live says whether the key is usable: instantiated, and not revoked,
// dead, negative or invalidated (a revoked key stays in /proc/keys until
// the garbage collector takes it).
func (k ProcKey) Live() bool {
	return strings.Contains(k.Flags, "I") && !strings.ContainsAny(k.Flags, "RDNi")
}

// ParseProcKeys parses /proc/keys ("<hex id> <flags> <usage> <timeout>
// <perm> <uid> <gid> <type> <description>: <summary>"). Lines that do not
// have that shape are skipped.
func ParseProcKeys(r io.Reader) ([]ProcKey, error) {
	var keys []ProcKey
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 {
			continue
		}
		id, err := strconv.ParseUint(f[0], 16, 31)
		if err != nil || id == 0 {
			continue
		}
		// The description may contain spaces (PSK identities do): it is
		// the rest of the line after the type column (padded to 9),
		// ended by ": " and a type-specific summary.
		desc := strings.TrimLeft(afterFields(sc.Text(), 8), " ")
		if i := strings.LastIndex(desc, ": "); i >= 0 {
			desc = desc[:i]
		}
		keys = append(keys, ProcKey{ID: int(id), Flags: f[1], Type: f[7], Description: desc})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/keys: %w", err)
	}
	return keys, nil
}

// FindKey returns the serial of the first key of the type with the exact
// description, 0 when there is none.
func FindKey(keys []ProcKey, typ, desc string) int {
	for _, k := range keys {
		if k.Type == typ && k.Description == desc {
			return k.ID
		}
	}
	return 0
}

// afterFields returns what follows the first n space-separated fields of
// line.
func afterFields(line string, n int) string {
	for ; n > 0; n-- {
		line = strings.TrimLeft(line, " ")
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return ""
		}
		line = line[i:]
	}
	return line
}

// Serials decodes what KEYCTL_READ returns for a keyring: the serials of
// its keys, 32-bit in the host's byte order; a trailing partial serial is dropped.
func Serials(b []byte) []int {
	ids := make([]int, 0, len(b)/4)
	for ; len(b) >= 4; b = b[4:] {
		ids = append(ids, int(int32(binary.NativeEndian.Uint32(b))))
	}
	return ids
}
