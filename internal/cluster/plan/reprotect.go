package plan

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// Reprotection is what re-protection does for one volume now: fail the
// member Member (Fail: the engine still counts it active), move slot
// Member.Slot to Member's drive (Replace), or nothing, with the reason in
// Why ("" when every member's node is alive).
type Reprotection struct {
	Fail, Replace bool
	Member        model.VolumeMember
	Why           string
}

// Reprotect decides the re-protection of vol, which this node owns and
// runs, with st its engine's status: a member whose node has been down
// (not alive) for at least interval since downSince[node] gets a
// replacement drive (Replacement's rule and preference: the group keeps
// at most M members per failure domain). One slot at a time: nothing
// while a slot's replace is pending (its record member has no UUID yet)
// or a task (rebuild, resync, scrub) runs, so that one rebuild follows
// the other. A member the engine still counts active (no I/O has reached
// it since its node went down) is failed first, as an admin would before
// a replace. A member that failed for a reason that does not bring it
// back (an I/O error, an admin's fail) on a live node is replaced at once
// when a spare fits (SpareReplacement), whatever the interval. interval
// <= 0 turns re-protection of down nodes off. Why names instants, not
// durations, so that it stays the same from one reconcile to the next
// (the owner publishes its status only when it changes). Pure.
func Reprotect(v View, vol model.Volume, st model.VolumeStatus, downSince map[string]time.Time, now time.Time, interval time.Duration) Reprotection {
	if vol.State != model.VolumeReady {
		return Reprotection{}
	}
	var down, failed []model.VolumeMember
	for _, m := range vol.Members {
		if n, ok := v.node(m.Node); !ok || !n.Alive {
			down = append(down, m)
		} else if staysFailed(st, m.Slot) {
			failed = append(failed, m)
		}
	}
	if len(down) == 0 && len(failed) == 0 {
		return Reprotection{}
	}
	for _, m := range vol.Members {
		if m.UUID == "" {
			return Reprotection{Why: fmt.Sprintf("slot %d is being replaced (%s:%s); the next one follows", m.Slot, m.Node, m.Drive)}
		}
	}
	if st.Task != "" {
		return Reprotection{Why: fmt.Sprintf("waits for the running %s", st.Task)}
	}
	var why []string
	for _, m := range failed {
		r, err := SpareReplacement(v, vol, m.Slot)
		if err == nil {
			return Reprotection{Replace: true, Member: r}
		}
		why = append(why, fmt.Sprintf("slot %d failed (%s): no spare fits; fabraid volume replace picks any free drive", m.Slot, failureOf(st, m.Slot)))
	}
	if len(down) > 0 && interval <= 0 {
		why = append(why, "re-protection of down nodes is off (down_out_interval 0): replace their members with fabraid volume replace")
		down = nil
	}
	for _, m := range down {
		since, ok := downSince[m.Node]
		if !ok {
			since = now
		}
		downFor := fmt.Sprintf("node %s down since %s", m.Node, since.UTC().Format(time.RFC3339))
		if at := since.Add(interval); now.Before(at) {
			why = append(why, fmt.Sprintf("slot %d: %s; replaced at %s (down_out_interval %s)",
				m.Slot, downFor, at.UTC().Format(time.RFC3339), interval))
			continue
		}
		if roleOf(st, m.Slot) == "active" {
			return Reprotection{Fail: true, Member: m, Why: fmt.Sprintf("slot %d: %s: failing it before its replace", m.Slot, downFor)}
		}
		r, err := Replacement(v, vol, m.Slot, "", "")
		if err != nil {
			why = append(why, fmt.Sprintf("slot %d: %s: %v", m.Slot, downFor, err))
			continue
		}
		return Reprotection{Replace: true, Member: r}
	}
	return Reprotection{Why: strings.Join(why, "; ")}
}

// staysFailed says whether slot failed in st for a reason that does not
// bring it back by itself (superblock.FailReason.Returns: an I/O error,
// an admin's fail, an unrecorded reason), so that a spare replaces it at
// once, as mdadm's spares do. A missing or unreachable member returns
// with a partial resync when its device is back: its node's
// down_out_interval decides.
func staysFailed(st model.VolumeStatus, slot int) bool {
	if roleOf(st, slot) != "failed" {
		return false
	}
	switch failureOf(st, slot) {
	case "missing", "unreachable":
		return false
	}
	return true
}

// failureOf is slot's failure reason in st.
func failureOf(st model.VolumeStatus, slot int) string {
	for _, m := range st.Members {
		if m.Slot == slot {
			return m.Failure
		}
	}
	return ""
}

// roleOf is slot's role in st ("" when st does not list it).
func roleOf(st model.VolumeStatus, slot int) string {
	for _, m := range st.Members {
		if m.Slot == slot {
			return m.Role
		}
	}
	return ""
}
