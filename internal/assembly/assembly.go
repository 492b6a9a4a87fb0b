// Package assembly is the boot-time assembly policy, mdadm's incremental
// mode for fabraid: a volume starts as soon as every member it expects is
// present; while some are missing it waits, and after a last-resort timeout
// it starts degraded, but only when every group has at least K members. With
// fewer it never starts. Decide is pure: the caller (the volume manager's
// scan) feeds it what it found and logs the Reason.
//
// Not wired into fabraidd yet (docs/admin-guide.md, "Boot").
package assembly

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// DefaultTimeout is the last-resort wait (mdadm's last-resort timer uses 30 s).
const DefaultTimeout = 30 * time.Second

// Action is what to do with a volume now.
type Action int

// Actions.
const (
	Wait          Action = iota // not yet: members expected, timeout not reached
	Start                       // every expected member is present
	StartDegraded               // last resort: timeout passed, >= K per group
	Refuse                      // some group has fewer than K members: never start
)

func (a Action) String() string {
	return [...]string{"wait", "start", "start-degraded", "refuse"}[a]
}

// Input is one volume as the scan sees it.
type Input struct {
	Geometry layout.Geometry
	// Expected[slot]: the newest superblock records the slot as a member
	// that should be present (not failed, not a spare left out).
	Expected []bool
	// Present[slot]: a drive with that slot's member UUID was found.
	Present []bool
	// FirstSeen is when the first member of the volume was seen.
	FirstSeen time.Time
	Now       time.Time
	Timeout   time.Duration // <= 0: DefaultTimeout
}

// Decision is the action and why (for the journal and volume show).
type Decision struct {
	Action Action
	// Retry is how long to wait before deciding again (Wait only).
	Retry  time.Duration
	Reason string
}

// Decide applies the policy.
func Decide(in Input) Decision {
	g := in.Geometry
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	var missing []string
	short := ""
	for grp := 0; grp < g.Groups; grp++ {
		present := 0
		for m := 0; m < g.Width(); m++ {
			s := g.Slot(grp, m)
			if s < len(in.Present) && in.Present[s] {
				present++
			} else if s < len(in.Expected) && in.Expected[s] {
				missing = append(missing, fmt.Sprint(s))
			}
		}
		if present < g.K && short == "" {
			short = fmt.Sprintf("group %d has %d of the %d members it needs", grp, present, g.K)
		}
	}
	switch {
	case len(missing) == 0 && short == "":
		return Decision{Action: Start, Reason: "all expected members present"}
	case short != "" && len(missing) == 0:
		return Decision{Action: Refuse, Reason: short + "; no other member is expected"}
	}
	waited := in.Now.Sub(in.FirstSeen)
	slots := "missing slot(s) " + strings.Join(missing, ",")
	if waited < timeout {
		return Decision{Action: Wait, Retry: timeout - waited,
			Reason: fmt.Sprintf("waiting for %s: %v of %v last-resort timeout", slots, waited.Round(time.Second), timeout)}
	}
	if short != "" {
		return Decision{Action: Refuse, Reason: fmt.Sprintf("%s after %v: %s; waiting for members, never starting with fewer", slots, timeout, short)}
	}
	return Decision{Action: StartDegraded, Reason: fmt.Sprintf("%s after the %v last-resort timeout; every group has >= %d members: starting degraded", slots, timeout, g.K)}
}
