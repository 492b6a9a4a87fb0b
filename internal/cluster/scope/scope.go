// Package scope decides which changes in etcd concern a node: the changes
// that ask its reconcile loop for a pass now rather than at its next
// periodic pass. It is pure (no etcd, no clock) and table-tested.
//
// The reconcile loop is level-triggered: a pass reads the whole view, so a
// change that kicks no pass is still acted on at the next periodic one.
// Scoping therefore costs latency only where it errs, never correctness,
// and errs towards kicking: what it cannot place (an unknown or
// unparsable key or value, no view yet) kicks.
package scope

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

// Event is one change of a key, as a watch reports it.
type Event struct {
	Key    string
	Value  []byte // the new value; empty for a delete
	Delete bool
}

// Interest is what a node's last view made its business: the volumes it
// owns (or is the record owner of), holds a member of, consumes, or takes
// part in a move of. A nil Volumes set (no view yet) means every volume.
type Interest struct {
	Self    string
	Volumes map[string]bool // by volume UUID
}

// Of is self's interest in the volumes and moves of a view.
func Of(self string, vols []model.Volume, moves []model.Move) Interest {
	in := Interest{Self: self, Volumes: map[string]bool{}}
	for _, v := range vols {
		if names(v, self) {
			in.Volumes[v.UUID] = true
		}
	}
	for _, m := range moves {
		if m.From == self || m.To == self {
			in.Volumes[m.Volume] = true
		}
	}
	return in
}

// names says whether a volume record involves node: its owner, the node
// of one of its members, or a node it is attached to.
func names(v model.Volume, node string) bool {
	return v.Owner == node || v.AttachedTo(node) ||
		slices.ContainsFunc(v.Members, func(m model.VolumeMember) bool { return m.Node == node })
}

// everyone are the prefixes whose every change concerns every node: the
// registry and liveness (allowed hosts, member reachability, owner
// choice), host keys (every export admits every host), drains.
var everyone = []string{keys.NodesPrefix, keys.AlivePrefix, keys.HostKeysPrefix, keys.DrainsPrefix}

// Kicks says whether ev asks in.Self's loop for a pass now. Statuses,
// paths, requests and other keys each node writes for itself never kick.
func (in Interest) Kicks(ev Event) bool {
	k := ev.Key
	for _, p := range everyone {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	switch {
	case strings.HasPrefix(k, keys.OwnersPrefix):
		// A vanished owner key may be taken over by any node that may
		// own (plan.ChooseOwner); a new holder concerns the volume's nodes.
		return ev.Delete || in.knows(strings.TrimPrefix(k, keys.OwnersPrefix))
	case strings.HasPrefix(k, keys.OwnerSessionsPrefix):
		// A node's owner session ended: it is no takeover choice now
		// (plan.ChooseOwner over the lapsed nodes), whether it held a
		// key or not.
		return ev.Delete
	case strings.HasPrefix(k, keys.VolumesPrefix):
		u := strings.TrimPrefix(k, keys.VolumesPrefix)
		if in.knows(u) {
			return true
		}
		var v model.Volume
		return !ev.Delete && (json.Unmarshal(ev.Value, &v) != nil || names(v, in.Self))
	case strings.HasPrefix(k, keys.HostKeyAcksPrefix):
		// An acknowledgement of this node's pending host key may end its
		// rotation (docs/cluster.md, "Key rotation").
		return strings.HasPrefix(k, keys.HostKeyAcks(in.Self))
	case strings.HasPrefix(k, keys.FencePrefix):
		u, _, _ := strings.Cut(strings.TrimPrefix(k, keys.FencePrefix), "/")
		return in.knows(u)
	case strings.HasPrefix(k, keys.MovesPrefix):
		if in.knows(strings.TrimPrefix(k, keys.MovesPrefix)) {
			return true
		}
		var m model.Move
		return !ev.Delete && (json.Unmarshal(ev.Value, &m) != nil || m.From == in.Self || m.To == in.Self)
	}
	return false
}

// knows says whether volume u is in the interest (every volume before a
// view).
func (in Interest) knows(u string) bool {
	return in.Volumes == nil || in.Volumes[u]
}
