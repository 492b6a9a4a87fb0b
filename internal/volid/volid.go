// Package volid is a volume's identity: its UUID (the dashed form every
// interface shows), the subsystem NQN it is exported under, and the rules
// for its name. It is a leaf (the standard library only), so that the CLI,
// the Storage Scale packages (nsd/...) and the cluster's pure adapters
// (internal/cluster/plan) know a volume without linking the volume
// manager.
package volid

import (
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
)

// UUID is a volume's (or a member's) UUID, as the superblock stores it. A
// [16]byte converts to it and back without a cast.
type UUID [16]byte

// String is Format(u).
func (u UUID) String() string { return Format(u) }

// Format formats a UUID in the dashed lowercase form.
func Format(u UUID) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ParseUUID parses the dashed form Format writes, in either case.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	h := strings.ReplaceAll(s, "-", "")
	if len(s) != 36 || len(h) != 32 {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	if Format(u) != strings.ToLower(s) {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	return u, nil
}

// NQNPrefix is the subsystem NQN prefix of exported volumes.
const NQNPrefix = "nqn.2026-11.io.fabraid:vol:"

// NQN returns the subsystem NQN of the volume with UUID u.
func NQN(u UUID) string { return NQNPrefix + Format(u) }

// ParseNQN returns the UUID of the volume exported as nqn, which must be
// exactly what NQN makes.
func ParseNQN(nqn string) (UUID, error) {
	s, ok := strings.CutPrefix(nqn, NQNPrefix)
	if !ok {
		return UUID{}, fmt.Errorf("%q is not a fabraid volume NQN (%s<uuid>)", nqn, NQNPrefix)
	}
	u, err := ParseUUID(s)
	if err != nil || Format(u) != s {
		return UUID{}, fmt.Errorf("%q is not a fabraid volume NQN (%s<uuid>)", nqn, NQNPrefix)
	}
	return u, nil
}

// CheckName reports whether name can be a volume name: 1-32 characters,
// none of them whitespace, control characters, '/', quotes, '\' or '$'
// (systemd passes the name to the engine on a command line, where those
// would be split, unquoted or substituted).
func CheckName(name string) error {
	if name == "" || len(name) > 32 {
		return fmt.Errorf("volume name %q: want 1-32 characters", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar || strings.ContainsRune(`/"'\$`, r) {
			return fmt.Errorf("volume name %q: no spaces, control characters, '/', quotes, '\\' or '$'", name)
		}
	}
	return nil
}

// CheckNewName is the rule for the name of a volume being created: 1-32
// of the ASCII letters, digits, '_', '.' and '-', the first a letter,
// digit or '_'. Every such name is its own /dev/fabraid/<name> link (udev
// keeps these characters as they are), its own engine unit and its own
// Storage Scale NSD name; it cannot be taken for an option ("--help"), for
// "." or "..", and it carries no invisible or direction-changing
// characters. Volumes made before this rule keep their names (CheckName).
func CheckNewName(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
		case (r == '.' || r == '-') && i > 0:
		default:
			return fmt.Errorf("volume name %q: use ASCII letters, digits, '_', '.' and '-', starting with a letter, digit or '_'", name)
		}
	}
	return nil
}
