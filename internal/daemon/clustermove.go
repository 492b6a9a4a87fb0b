package daemon

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// The planned move of a volume (`fabraid volume move NAME NODE`,
// docs/cluster.md "Planned move"): the pure core, not wired into the
// cluster loop yet (it needs the owner takeover of issue 13's failover).
//
// The order follows what the Linux host does (docs/nvmeof.md,
// "Switchover", measured in TestIntegrationANASwitchover):
//   - a path in ANA state optimized or non-optimized takes I/O at once, so
//     the new owner presents no usable path before it runs the engine
//     under its own epoch;
//   - with every path inaccessible the host requeues I/O, no error;
//   - a target that answers a reconnect without the NQN (unlinked,
//     removed) makes the host delete that controller at once (DNR), and
//     EIO follows if it was the last path: the old owner keeps its export
//     linked and inaccessible until the new owner serves.
//
// Phases, each written to the move record with a CAS by the node that
// finished the previous one:
//
//	requested   any node: checkMove passed
//	  old owner: ANA inaccessible, flush, freeze, stop the engine (export
//	  kept, inaccessible), Resign the owner key, CAS the record's owner to
//	  the target
//	resigned
//	  target: Acquire (epoch E' > E), fence for E', assemble with E',
//	  export optimized; consumers connect the new path and their queued
//	  I/O completes
//	serving
//	  old owner: remove its export (consumers that connected the target
//	  lose only the dead path)
//	done
//
// A node that dies mid-move is handled by failover: before "resigned" the
// old owner's lease runs out and the target (the record's owner by then,
// or failover's choice) takes over; after it, the target is the owner.

// Move phases.
const (
	MoveRequested = "requested"
	MoveResigned  = "resigned"
	MoveServing   = "serving"
	MoveDone      = "done"
	MoveFailed    = "failed"
)

// Move is the move record of a volume.
type Move struct {
	From  string `json:"from"`  // owner when the move was asked
	To    string `json:"to"`    // target node
	Epoch uint64 `json:"epoch"` // From's owner epoch when asked
	Phase string `json:"phase"`
	Error string `json:"error,omitempty"` // MoveFailed: why
}

// checkMove refuses a move that cannot or need not be made: the volume
// must be ready with a live owner and no move under way, and the target
// must be another registered, live node.
func checkMove(vol model.Volume, nodes []model.NodeStatus, target string, current *Move) error {
	if target == "" {
		return fmt.Errorf("volume %s: move to which node? (give a node name)", vol.Name)
	}
	if current != nil && current.Phase != MoveDone && current.Phase != MoveFailed {
		return fmt.Errorf("volume %s: a move from %s to %s is already under way (phase %s)", vol.Name, current.From, current.To, current.Phase)
	}
	if vol.State != model.VolumeReady {
		return fmt.Errorf("volume %s: state %s: only a ready volume can move", vol.Name, vol.State)
	}
	var names []string
	var to, from *model.NodeStatus
	for i := range nodes {
		names = append(names, nodes[i].Name)
		switch nodes[i].Name {
		case target:
			to = &nodes[i]
		case vol.Owner:
			from = &nodes[i]
		}
	}
	switch {
	case target == vol.Owner:
		return fmt.Errorf("volume %s: node %s already owns it", vol.Name, target)
	case to == nil:
		slices.Sort(names)
		return fmt.Errorf("volume %s: node %s is not in the cluster (nodes: %s)", vol.Name, target, strings.Join(names, ", "))
	case !to.Alive:
		return fmt.Errorf("volume %s: node %s is down: a volume moves only to a live node", vol.Name, target)
	case vol.Owner == "" || from == nil || !from.Alive:
		return fmt.Errorf("volume %s: its owner %q is not running: failover, not a move, brings it back", vol.Name, vol.Owner)
	case len(to.StorageAddresses) == 0 && to.ClusterAddress == "":
		return fmt.Errorf("volume %s: node %s has no storage address to export on", vol.Name, target)
	}
	return nil
}

// moveFacts is what a node knows when it decides its part of a move.
type moveFacts struct {
	Self string
	// KeyHolder and KeyEpoch are the volume's owner key ("" when free).
	KeyHolder string
	KeyEpoch  uint64
	// ServingEpoch is the epoch of the owner status the target published
	// (0: none yet).
	ServingEpoch uint64
	// Alive: the node's liveness key exists.
	Alive func(node string) bool
}

// moveAction is what this node does next for a move.
type moveAction int

const (
	moveWait     moveAction = iota // nothing for this node now
	moveDrain                      // old owner: inaccessible, flush, freeze, stop, Resign, owner := To; phase resigned
	moveTakeOver                   // target: Acquire, fence, assemble, optimized; phase serving
	moveUnexport                   // old owner: remove its export; phase done
	moveFinish                     // target: the old owner is down (its export with it); phase done
	moveAbandon                    // the move cannot finish as asked: phase failed (failover owns the volume)
)

func (a moveAction) String() string {
	return [...]string{"wait", "drain", "take over", "unexport", "finish", "abandon"}[a]
}

// nextMoveStep is this node's next action for move m. Pure.
func nextMoveStep(m Move, f moveFacts) (moveAction, string) {
	switch m.Phase {
	case MoveRequested:
		switch {
		case f.KeyHolder == m.From && f.KeyEpoch != m.Epoch:
			return moveAbandon, fmt.Sprintf("%s holds the volume at epoch %d, not %d as when the move was asked", m.From, f.KeyEpoch, m.Epoch)
		case f.KeyHolder != "" && f.KeyHolder != m.From:
			return moveAbandon, fmt.Sprintf("%s took the volume over (epoch %d) before %s drained it", f.KeyHolder, f.KeyEpoch, m.From)
		case !f.Alive(m.To):
			return moveAbandon, fmt.Sprintf("target %s went down before the old owner drained", m.To)
		case f.KeyHolder == "":
			return moveAbandon, fmt.Sprintf("%s lost the volume (no owner key) before it drained: failover takes it", m.From)
		case f.Self == m.From:
			return moveDrain, ""
		}
	case MoveResigned:
		switch {
		case f.KeyHolder == "" && f.Self == m.To:
			return moveTakeOver, ""
		case f.KeyHolder == m.To && f.KeyEpoch > m.Epoch && f.Self == m.To:
			// Acquired but not yet serving (crashed or retrying after
			// Acquire): finish the takeover under the held epoch.
			return moveTakeOver, ""
		case f.KeyHolder != "" && f.KeyHolder != m.To:
			return moveAbandon, fmt.Sprintf("%s took the volume (epoch %d) instead of %s", f.KeyHolder, f.KeyEpoch, m.To)
		}
	case MoveServing:
		if f.Self == m.From && f.KeyHolder == m.To && f.ServingEpoch > m.Epoch {
			return moveUnexport, ""
		}
		if !f.Alive(m.From) && f.Self == m.To {
			return moveFinish, ""
		}
	}
	return moveWait, ""
}

// nodeIndex is self's place in the cluster's nodes ordered by join time,
// then name: the index of its volume exports' controller id range
// (volmgr.CntlIDRange). It is the same on every node reading the same
// registry and changes for a node only when an earlier-joined node is
// removed (controllers made before keep their ids). -1 when self is not
// registered.
func nodeIndex(nodes []model.NodeStatus, self string) int {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b model.NodeStatus) int {
		if c := a.Joined.Compare(b.Joined); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return slices.IndexFunc(sorted, func(n model.NodeStatus) bool { return n.Name == self })
}
