package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
		cfg := Config{Name: "big", K: 4, M: 2, ChunkSize: 64 << 10, RegionSize: 1 << 20, AssumeZeroed: true,
			Domains: []string{ownerDomain, ownerDomain, "n1", "n1", "n2", "n2"}}
		if small {
			cfg.DataOffset = DefaultDataOffset
		}
		v, err := createSparse(t, 1<<30, cfg, Options{Logger: quietLogger(), OwnerDomain: ownerDomain})
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

// TestConfigJournalBytes: a requested journal area is at least what was
// asked (the data offset rounded up to 1 MiB), 0 keeps the default data
// offset, and a journal below one record, above the maximum, or against
// a different DataOffset is refused with the bound in the error.
func TestConfigJournalBytes(t *testing.T) {
	g := layout.Geometry{K: 4, M: 2, Groups: 1, ChunkSize: 64 << 10}
	minimum := journalMinBytes(g) // 2 header blocks + 132 KiB
	for _, c := range []struct {
		name       string
		member     int64
		journal    int64
		dataOffset int64
		wantOffset int64  // 0: defaultDataOffset
		wantErr    string // substring; "" : success
	}{
		{name: "default small", member: 64 << 20},
		{name: "default 1 GiB", member: 1 << 30},
		{name: "8M on 64 MiB", member: 64 << 20, journal: 8 << 20, wantOffset: 9 << 20},
		{name: "4M on 64 MiB", member: 64 << 20, journal: 4 << 20, wantOffset: 5 << 20},
		{name: "minimum", member: 64 << 20, journal: minimum, wantOffset: 1 << 20},
		{name: "1 MiB exactly", member: 64 << 20, journal: 1 << 20, wantOffset: 2 << 20},
		{name: "16M on 1 GiB", member: 1 << 30, journal: 16 << 20, wantOffset: 17 << 20},
		// A 12 TiB member's bitmap at 64 MiB regions (24 KiB) would eat
		// into a journal that fills the 1 MiB offset: regions grow instead.
		{name: "no slack, 12 TiB", member: 12 << 40, journal: 1<<20 - 48<<10, wantOffset: 1 << 20},
		{name: "matching data offset", member: 64 << 20, journal: 8 << 20, dataOffset: 9 << 20, wantOffset: 9 << 20},
		{name: "below minimum", member: 64 << 20, journal: minimum - 1, wantErr: fmt.Sprintf("below the minimum of %d", minimum)},
		{name: "above a quarter", member: 64 << 20, journal: 16<<20 + 4096, wantErr: fmt.Sprintf("above the maximum of %d", 16<<20)},
		// The largest journal still makes a superblock the engine
		// accepts (the area it derives is within superblock.MaxJournalBytes).
		{name: "the maximum", member: 8 << 30, journal: MaxJournalBytes, wantOffset: journalDataOffset(MaxJournalBytes)},
		{name: "above the maximum", member: 8 << 30, journal: MaxJournalBytes + 4096, wantErr: fmt.Sprintf("above the maximum of %d", MaxJournalBytes)},
		{name: "disagreeing data offset", member: 64 << 20, journal: 8 << 20, dataOffset: 2 << 20, wantErr: "needs data offset 9437184"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := createSparse(t, c.member, Config{Name: "j", K: 4, M: 2, ChunkSize: g.ChunkSize,
				AssumeZeroed: true, JournalBytes: c.journal, DataOffset: c.dataOffset}, Options{Logger: quietLogger()})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			sb := v.base
			want := c.wantOffset
			if want == 0 {
				want = defaultDataOffset(g, c.member)
			}
			if sb.DataOffset != want {
				t.Errorf("data offset %d, want %d", sb.DataOffset, want)
			}
			if sb.JournalBytes < c.journal || sb.JournalOffset+sb.JournalBytes != sb.DataOffset {
				t.Errorf("journal area [%d, +%d) before data offset %d, want at least %d", sb.JournalOffset, sb.JournalBytes, sb.DataOffset, c.journal)
			}
		})
	}
}

// createSparse creates cfg's volume on K+M sparse files of size bytes.
func createSparse(t *testing.T, size int64, cfg Config, opts Options) (*Volume, error) {
	t.Helper()
	dir := t.TempDir()
	var devs []Member
	for i := range cfg.K + cfg.M {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, NewFileMember(f))
	}
	return Create(cfg, devs, nil, opts)
}

// TestCheckJournalBytes: the check a cluster makes before its owner
// creates the volume refuses what Create refuses.
func TestCheckJournalBytes(t *testing.T) {
	cfg := Config{K: 4, M: 2}
	for _, c := range []struct {
		journal, member int64
		ok              bool
	}{{0, 64 << 20, true}, {8 << 20, 64 << 20, true}, {4096, 64 << 20, false}, {32 << 20, 64 << 20, false}} {
		cfg.JournalBytes = c.journal
		if err := CheckJournalBytes(cfg, c.member); (err == nil) != c.ok {
			t.Errorf("journal %d on members of %d: %v, want ok=%v", c.journal, c.member, err, c.ok)
		}
	}
}
