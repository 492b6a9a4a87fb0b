package volmgr

import (
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
)

// The volume's rebuild bytes come from the running rebuild, else from the
// last one; a running scrub or resync after a crash is no rebuild.
func TestRebuildBytes(t *testing.T) {
	last := &engine.Progress{Kind: "rebuild", Partial: true, Regions: 2, CoverBytes: 2 << 20, Bytes: 2 << 20, MemberBytes: 64 << 20}
	run := &engine.Progress{Kind: "rebuild", CoverBytes: 64 << 20, Bytes: 1 << 20, MemberBytes: 64 << 20}
	for _, tc := range []struct {
		name string
		s    engine.Status
		want *api.RebuildBytes
	}{
		{"none", engine.Status{}, nil},
		{"last", engine.Status{LastRebuild: last, Progress: &engine.Progress{Kind: "scrub"}},
			&api.RebuildBytes{Partial: true, Regions: 2, CoverBytes: 2 << 20, Bytes: 2 << 20, MemberBytes: 64 << 20}},
		{"running", engine.Status{LastRebuild: last, Progress: run},
			&api.RebuildBytes{Running: true, CoverBytes: 64 << 20, Bytes: 1 << 20, MemberBytes: 64 << 20}},
	} {
		got := rebuildBytes(tc.s)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
