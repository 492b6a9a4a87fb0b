package store

import (
	"context"
	"fmt"
)

// Leads reports whether this member is the raft leader now.
func (s *Server) Leads() bool { return s.e.Server.Leader() == s.e.Server.MemberID() }

// MoveLeader hands this member's leadership to voting member to and
// returns once to leads (or ctx ends). Refused unless this member leads.
// The transferee campaigns at once (raft's TimeoutNow), so the group has
// no leader for about one round trip, not an election timeout.
func (s *Server) MoveLeader(ctx context.Context, to uint64) error {
	lead := s.e.Server.Lead()
	if lead != uint64(s.e.Server.MemberID()) {
		return fmt.Errorf("store: move leader to %x: this member (%x) does not lead (%x does)", to, uint64(s.e.Server.MemberID()), lead)
	}
	if err := s.e.Server.MoveLeader(ctx, lead, to); err != nil {
		return fmt.Errorf("store: move leader to %x: %w", to, err)
	}
	return nil
}
