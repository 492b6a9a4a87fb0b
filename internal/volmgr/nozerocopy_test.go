package volmgr

import (
	"slices"
	"testing"

	"github.com/fabraid/fabraid/kernel/ublk"
)

// ublk_zero_copy = off reaches a child engine as --no-zero-copy (only when
// set) and an engine unit through its spec file.
func TestNoZeroCopyReachesEngine(t *testing.T) {
	s := EngineSpec{UUID: [16]byte{3}, Name: "v", Members: []string{"/dev/a"}, UblkID: ublk.AnyID}
	if slices.Contains(childArgs(s, "/s"), "--no-zero-copy") {
		t.Fatalf("args without NoZeroCopy: %q", childArgs(s, "/s"))
	}
	s.NoZeroCopy = true
	if got := childArgs(s, "/s"); got[len(got)-1] != "--no-zero-copy" {
		t.Fatalf("args with NoZeroCopy: %q", got)
	}
	p := SpecPath(t.TempDir(), "v")
	if err := WriteSpec(p, specFile(s, "/s")); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSpec(p); err != nil || !got.NoZeroCopy {
		t.Fatalf("ReadSpec = %+v, %v; want no_zero_copy", got, err)
	}
}

// rebuild_busy_rate reaches a child engine as --rebuild-busy-rate (only
// when set) and an engine unit through its spec file.
func TestRebuildBusyRateReachesEngine(t *testing.T) {
	s := EngineSpec{UUID: [16]byte{3}, Name: "v", Members: []string{"/dev/a"}, UblkID: ublk.AnyID}
	if slices.Contains(childArgs(s, "/s"), "--rebuild-busy-rate") {
		t.Fatalf("args without a rate: %q", childArgs(s, "/s"))
	}
	s.RebuildBusyRate = 64 << 20
	if got := childArgs(s, "/s"); !slices.Equal(got[len(got)-2:], []string{"--rebuild-busy-rate", "67108864"}) {
		t.Fatalf("args with a rate: %q", got)
	}
	p := SpecPath(t.TempDir(), "v")
	if err := WriteSpec(p, specFile(s, "/s")); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSpec(p); err != nil || got.RebuildBusyRate != 64<<20 {
		t.Fatalf("ReadSpec = %+v, %v; want rebuild_busy_rate", got, err)
	}
}
