// Package name maps fabraid volume names to IBM Storage Scale NSD names.
//
// IBM's mmcrnsd page (nsd=NsdName) allows only the characters 'A'-'Z',
// 'a'-'z', '0'-'9' and '_' in an NSD name and reserves names that begin
// with "gpfs" (Scale names its own NSDs gpfsNNnsd). fabraid volume names
// allow more (any 1-32 bytes without spaces, control characters, '/',
// quotes, '\' or '$'), so Map rewrites them:
//
//  1. every character outside [A-Za-z0-9_] becomes '_' ("scratch-01" ->
//     "scratch_01", "vol.a" -> "vol_a"; a multi-byte UTF-8 character is one
//     '_', an invalid byte is one '_');
//  2. a result starting with "gpfs" in any case gets the prefix "fab_"
//     ("gpfs1" -> "fab_gpfs1");
//  3. a result longer than MaxLen is refused.
//
// A name that is already valid and does not start with "gpfs" is kept as it
// is, and Map is idempotent. Map is not injective ("a-b" and "a.b" both give
// "a_b"): Collisions finds volumes that would share an NSD name, and the
// stanza writer refuses them rather than guess.
package name

import (
	"fmt"
	"sort"
	"strings"
)

// MaxLen is the longest NSD name Map returns. IBM's pages name no maximum;
// fabraid volume names are at most 32 bytes, so mapped names are at most
// 36 characters, and anything longer is refused as a safety net.
const MaxLen = 63

// Prefix is put in front of names that would start with the reserved
// "gpfs".
const Prefix = "fab_"

// Check reports whether s is a valid NSD name by IBM's rules (and MaxLen).
func Check(s string) error {
	if s == "" {
		return fmt.Errorf("NSD name is empty")
	}
	if len(s) > MaxLen {
		return fmt.Errorf("NSD name %q: longer than %d characters", s, MaxLen)
	}
	for i := 0; i < len(s); i++ {
		if !allowed(s[i]) {
			return fmt.Errorf("NSD name %q: only letters, digits and '_' are allowed", s)
		}
	}
	if reserved(s) {
		return fmt.Errorf("NSD name %q: names starting with \"gpfs\" are reserved by Storage Scale", s)
	}
	return nil
}

func allowed(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func reserved(s string) bool {
	return len(s) >= 4 && strings.EqualFold(s[:4], "gpfs")
}

// Map returns the NSD name of volume (rules in the package comment), or an
// error when no valid name can be derived (empty, or too long).
func Map(volume string) (string, error) {
	if volume == "" {
		return "", fmt.Errorf("volume name is empty")
	}
	var b strings.Builder
	for _, r := range volume {
		if r < 0x80 && allowed(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if reserved(s) {
		s = Prefix + s
	}
	if err := Check(s); err != nil {
		return "", fmt.Errorf("volume %q: %w", volume, err)
	}
	return s, nil
}

// Collisions returns, for every NSD name that more than one of volumes maps
// to, the sorted volume names sharing it. Names that do not map are
// ignored (Map reports them).
func Collisions(volumes []string) map[string][]string {
	by := map[string][]string{}
	for _, v := range volumes {
		if n, err := Map(v); err == nil {
			by[n] = append(by[n], v)
		}
	}
	out := map[string][]string{}
	for n, vs := range by {
		if len(vs) > 1 {
			sort.Strings(vs)
			out[n] = vs
		}
	}
	return out
}
