// Package units parses the byte sizes and rates that the CLI's flags and
// the configuration file take: a number with an optional K (or k), M, G
// or T suffix, powers of 1024. A leaf: standard library only.
package units

import (
	"fmt"
	"strconv"
)

// ParseBytes parses a non-negative byte count: 4096, 64K, 512M, 1G, 2T.
// It fails on anything else, on negative numbers and on counts that do
// not fit an int64.
func ParseBytes(s string) (int64, error) {
	v, mult := s, int64(1)
	if n := len(v); n > 0 {
		switch v[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			v = v[:n-1]
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)/mult {
		return 0, fmt.Errorf("%q: want a number with an optional K, M, G or T suffix (powers of 1024)", s)
	}
	return n * mult, nil
}
