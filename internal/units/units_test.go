package units

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "64K": 64 << 10, "64k": 64 << 10, "512M": 512 << 20, "1G": 1 << 30, "2T": 2 << 40} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-1", "1m", "1.5G", "x", " 1", "1 K", "9000000T"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, accepted", in, got)
		}
	}
}
