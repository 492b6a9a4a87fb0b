package nsd_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/nsd/name"
)

// TestNameMap: the documented mapping, checked against IBM's rules by the
// test's own checker.
func TestNameMap(t *testing.T) {
	for in, want := range map[string]string{
		"vol0": "vol0", "Scratch_01": "Scratch_01", "scratch-01": "scratch_01", "a.b": "a_b",
		"gpfs1": "fab_gpfs1", "GPFSdata": "fab_GPFSdata", "gpf": "gpf", "my-gpfs": "my_gpfs",
		"été": "_t_", "x\xffy": "x_y", "123": "123", "a#b=c": "a_b_c",
		strings.Repeat("v", 32): strings.Repeat("v", 32),
	} {
		got, err := name.Map(in)
		if err != nil || got != want {
			t.Errorf("Map(%q) = %q, %v; want %q", in, got, err, want)
			continue
		}
		if err := checkIBMName(got); err != nil {
			t.Errorf("Map(%q): %v", in, err)
		}
	}
	if _, err := name.Map(""); err == nil {
		t.Error("Map(\"\") succeeded")
	}
	if _, err := name.Map(strings.Repeat("a", name.MaxLen+1)); err == nil {
		t.Error("Map of an over-long name succeeded")
	}
	for _, bad := range []string{"", "a-b", "gpfs0nsd", "Gpfsx", "a b", strings.Repeat("a", name.MaxLen+1)} {
		if name.Check(bad) == nil {
			t.Errorf("Check(%q) accepted it", bad)
		}
	}
	c := name.Collisions([]string{"a-b", "a.b", "a_c", "gpfs1", "fab_gpfs1", "solo"})
	if len(c) != 2 || strings.Join(c["a_b"], ",") != "a-b,a.b" || strings.Join(c["fab_gpfs1"], ",") != "fab_gpfs1,gpfs1" {
		t.Errorf("collisions: %v", c)
	}
}

// FuzzNameMap: every name fabraid accepts for a volume maps to a name that
// IBM's rules accept; mapping is idempotent and keeps valid names as they
// are; whatever Map returns for other input is valid too.
func FuzzNameMap(f *testing.F) {
	for _, s := range []string{"vol0", "scratch-01", "gpfs", "GpFs-x", "été", "x\xffy", "a#b", strings.Repeat("-", 32), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := name.Map(s)
		if volid.CheckName(s) == nil && err != nil {
			t.Fatalf("volume name %q accepted by fabraid does not map: %v", s, err)
		}
		if err != nil {
			return
		}
		if e := checkIBMName(got); e != nil {
			t.Fatalf("Map(%q) = %q: %v", s, got, e)
		}
		if len(got) > name.MaxLen {
			t.Fatalf("Map(%q) = %q: longer than %d", s, got, name.MaxLen)
		}
		if again, err := name.Map(got); err != nil || again != got {
			t.Fatalf("Map(Map(%q)) = %q, %v; want %q", s, again, err, got)
		}
		if checkIBMName(s) == nil && got != s {
			t.Fatalf("valid name %q mapped to %q", s, got)
		}
		if n := utf8.RuneCountInString(s); len(got) != n && len(got) != n+len(name.Prefix) {
			t.Fatalf("Map(%q) = %q: one character per input character (+ prefix)", s, got)
		}
	})
}
