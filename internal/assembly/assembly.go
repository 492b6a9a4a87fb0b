// Package assembly is the boot-time assembly policy, mdadm's incremental
// mode for fabraid: a volume starts as soon as every member it expects is
// present; while some are missing it waits, and after a last-resort timeout
// it starts degraded, but only when every group has at least K in-sync
// members. With fewer it never starts. Decide is pure: the volume manager's
// gate (internal/volmgr/gate.go) feeds it what the scan found, logs the
// Reason and shows it in "fabraid volume show".
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
	StartDegraded               // last resort: timeout passed, >= K in sync per group
	Refuse                      // some group has fewer than K in sync: cannot start (until members come)
)

func (a Action) String() string {
	return [...]string{"wait", "start", "start-degraded", "refuse"}[a]
}

// Slot is one member slot as the scan sees it.
type Slot struct {
	// Member is the member UUID (text), named in the Reason.
	Member string
	// Expected: the newest superblock records the slot as a member that
	// should be present (active or rebuilding; not failed, not a spare).
	Expected bool
	// Present: a drive with that slot's member UUID was found.
	Present bool
	// InSync: present and active in the newest superblock (it holds valid
	// data everywhere and counts towards K).
	InSync bool
}

// Input is one volume as the scan sees it.
type Input struct {
	Geometry layout.Geometry
	Slots    []Slot // by slot number
	// FirstSeen is when the first member of the volume was seen.
	FirstSeen time.Time
	Now       time.Time
	Timeout   time.Duration // <= 0: DefaultTimeout
}

// Decision is the action and why (for the journal and volume show).
type Decision struct {
	Action Action
	// Retry is how long to wait before deciding again (Wait only): when
	// the last-resort timeout ends.
	Retry  time.Duration
	Reason string
	// Missing are the expected slots not present.
	Missing []int
}

// Decide applies the policy.
func Decide(in Input) Decision {
	g := in.Geometry
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	slot := func(s int) Slot {
		if s < len(in.Slots) {
			return in.Slots[s]
		}
		return Slot{}
	}
	var missing []int
	short := ""
	for grp := 0; grp < g.Groups; grp++ {
		inSync := 0
		for m := 0; m < g.Width(); m++ {
			s := slot(g.Slot(grp, m))
			if s.Present && s.InSync {
				inSync++
			}
			if s.Expected && !s.Present {
				missing = append(missing, g.Slot(grp, m))
			}
		}
		if inSync < g.K && short == "" {
			short = fmt.Sprintf("%d of %d members present, %d needed", inSync, g.Width(), g.K)
			if g.Groups > 1 {
				short = fmt.Sprintf("group %d has %d of %d members present, %d needed", grp, inSync, g.Width(), g.K)
			}
		}
	}
	d := Decision{Missing: missing}
	waitingFor := fmt.Sprintf("waiting for %d of %d members (%s)", len(missing), g.Members(), describe(missing, slot))
	switch {
	case short != "" && len(missing) == 0:
		d.Action, d.Reason = Refuse, "cannot start: "+short+"; no other member is expected"
	case short != "":
		d.Action, d.Reason = Refuse, "cannot start: "+short+"; "+waitingFor
	case len(missing) == 0:
		d.Action, d.Reason = Start, fmt.Sprintf("all %d expected members present", expected(in.Slots))
	default:
		waited := in.Now.Sub(in.FirstSeen)
		if waited < timeout {
			d.Action, d.Retry = Wait, timeout-waited
			d.Reason = fmt.Sprintf("%s; starts degraded in %v", waitingFor, d.Retry.Round(time.Second))
		} else {
			d.Action = StartDegraded
			d.Reason = fmt.Sprintf("%d of %d members missing after the %v last-resort timeout (%s); every group has >= %d: starting degraded",
				len(missing), g.Members(), timeout, describe(missing, slot), g.K)
		}
	}
	return d
}

// describe names the missing slots: "slot 3, member U" or
// "slot 3 member U; slot 5 member V".
func describe(missing []int, slot func(int) Slot) string {
	if len(missing) == 1 {
		return fmt.Sprintf("slot %d, member %s", missing[0], slot(missing[0]).Member)
	}
	parts := make([]string, len(missing))
	for i, s := range missing {
		parts[i] = fmt.Sprintf("slot %d member %s", s, slot(s).Member)
	}
	return strings.Join(parts, "; ")
}

func expected(slots []Slot) int {
	n := 0
	for _, s := range slots {
		if s.Expected {
			n++
		}
	}
	return n
}
