package volmgr

import (
	"github.com/fabraid/fabraid/engine"

	"github.com/fabraid/fabraid/internal/api"
)

// rebuildBytes returns the running rebuild's bytes, or the last one's, or
// nil when the engine has not rebuilt anything since it started.
func rebuildBytes(s engine.Status) *api.RebuildBytes {
	p, running := s.Progress, true
	if p == nil || p.Kind != "rebuild" {
		p, running = s.LastRebuild, false
	}
	if p == nil {
		return nil
	}
	return &api.RebuildBytes{Running: running, Partial: p.Partial, Regions: p.Regions, CoverBytes: p.CoverBytes,
		Bytes: p.Bytes, MemberBytes: p.MemberBytes}
}
