package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
)

// TestDefaultDataOffset: members below ~128 MiB keep the 1 MiB data
// offset (and the 3-record journal it leaves); from 1 GiB on the journal
// takes 8 MiB; a geometry whose 3 largest records exceed the share gets
// them.
func TestDefaultDataOffset(t *testing.T) {
	g42 := layout.Geometry{K: 4, M: 2, Groups: 1, ChunkSize: 64 << 10}
	g84 := layout.Geometry{K: 8, M: 4, Groups: 1, ChunkSize: 1 << 20}
	for _, c := range []struct {
		g    layout.Geometry
		size int64
		want int64
	}{
		{g42, 16 << 20, 1 << 20},
		{g42, 64 << 20, 1 << 20},
		{g42, 1 << 30, 9 << 20},
		{g42, 4 << 40, 9 << 20},
		{g84, 1 << 30, 13 << 20}, // 3 records of 4 KiB + 4 MiB: 12.01 MiB
	} {
		if got := defaultDataOffset(c.g, c.size); got != c.want {
			t.Errorf("%d+%d chunk %d, members of %d: data offset %d, want %d", c.g.K, c.g.M, c.g.ChunkSize, c.size, got, c.want)
		}
	}
}

// TestJournalOnLargeMembers: on members of 1 GiB (sparse files), an
// owner-journaled volume writes 24 MiB sequentially without a forced
// retire; the same volume with the 1 MiB data offset forces several.
func TestJournalOnLargeMembers(t *testing.T) {
	forced := map[bool]int64{}
	for _, small := range []bool{false, true} {
		dir := t.TempDir()
		var devs []Member
		for i := range 6 {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(1 << 30); err != nil {
				t.Fatal(err)
			}
			devs = append(devs, NewFileMember(f))
		}
		cfg := Config{Name: "big", K: 4, M: 2, ChunkSize: 64 << 10, RegionSize: 1 << 20, AssumeZeroed: true,
			Domains: []string{ownerDomain, ownerDomain, "n1", "n1", "n2", "n2"}}
		if small {
			cfg.DataOffset = DefaultDataOffset
		}
		v, err := Create(cfg, devs, nil, Options{Logger: quietLogger(), OwnerDomain: ownerDomain})
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 1<<20)
		for off := int64(0); off < 24<<20; off += 1 << 20 {
			if _, err := v.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
		}
		st := v.Status()
		forced[small] = st.JournalForcedRetires
		t.Logf("data offset %d: %d records, %d forced retires", v.base.DataOffset, st.JournalRecords, st.JournalForcedRetires)
		v.Close()
	}
	if forced[false] != 0 || forced[true] == 0 {
		t.Errorf("forced retires: %d with the default offset (want 0), %d with 1 MiB (want some)", forced[false], forced[true])
	}
}
