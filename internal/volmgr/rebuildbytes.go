package volmgr

import "github.com/fabraid/fabraid/engine"

// RebuildBytes is how much of its targets the running (Running) or the
// last rebuild since the engine started rewrites: a resync of returning
// members (Partial: only the regions dirty in the write-intent bitmap, a
// node that came back) or a full rebuild (a replacement, a member that
// failed on an I/O error). Sizes are per-member data bytes summed over
// the targets (engine.Progress).
type RebuildBytes struct {
	Running bool `json:"running"`
	Partial bool `json:"partial"`
	// Regions counts the bitmap regions the resync had to cover.
	Regions int64 `json:"regions"`
	// CoverBytes is what it had to write when it started, Bytes what it
	// wrote so far, MemberBytes the data area of one member.
	CoverBytes  int64 `json:"cover_bytes"`
	Bytes       int64 `json:"bytes"`
	MemberBytes int64 `json:"member_bytes"`
}

// rebuildBytes returns the running rebuild's bytes, or the last one's, or
// nil when the engine has not rebuilt anything since it started.
func rebuildBytes(s engine.Status) *RebuildBytes {
	p, running := s.Progress, true
	if p == nil || p.Kind != "rebuild" {
		p, running = s.LastRebuild, false
	}
	if p == nil {
		return nil
	}
	return &RebuildBytes{Running: running, Partial: p.Partial, Regions: p.Regions, CoverBytes: p.CoverBytes,
		Bytes: p.Bytes, MemberBytes: p.MemberBytes}
}
