package main

import (
	"path/filepath"
	"testing"
)

func TestParseUblkSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64K": 64 << 10, "512M": 512 << 20, "1G": 1 << 30, "2T": 2 << 40} {
		if got, err := parseUblkSize(in); err != nil || got != want {
			t.Errorf("parseUblkSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "-1M", "1.5G", "12X"} {
		if _, err := parseUblkSize(bad); err == nil {
			t.Errorf("parseUblkSize(%q) accepted", bad)
		}
	}
}

func TestOpenUblkBackend(t *testing.T) {
	for _, spec := range []string{"mem:1M", "null:1G", "file:" + filepath.Join(t.TempDir(), "img") + ":4M"} {
		b, done, err := openUblkBackend(spec)
		if err != nil {
			t.Errorf("%s: %v", spec, err)
			continue
		}
		if b.Size() <= 0 {
			t.Errorf("%s: size %d", spec, b.Size())
		}
		done()
	}
	for _, bad := range []string{"", "mem", "disk:1G", "volume:", "volume:/nonexistent/a,/nonexistent/b"} {
		if _, _, err := openUblkBackend(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
