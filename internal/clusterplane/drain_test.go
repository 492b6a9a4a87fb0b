package clusterplane

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// drainMoves: a drained node asks for the move of each ready volume it
// owns and holds, to ChooseOwner's node (never a drained or dead one),
// skips volumes being created, not held, owned elsewhere or already
// moving, and says which cannot move; an undrained node asks for none.
func TestDrainMoves(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	vols := []model.Volume{
		{UUID: "u1", Name: "v1", Owner: "node1", State: model.VolumeReady},
		{UUID: "u2", Name: "v2", Owner: "node1", State: model.VolumeReady},
		{UUID: "u3", Name: "v3", Owner: "node1", State: model.VolumeCreating},
		{UUID: "u4", Name: "v4", Owner: "node2", State: model.VolumeReady},
		{UUID: "u5", Name: "v5", Owner: "node1", State: model.VolumeReady}, // not held
		{UUID: "u6", Name: "v6", Owner: "node1", State: model.VolumeReady}, // a move to node1 under way
	}
	held := map[string]uint64{"u1": 11, "u2": 12, "u3": 13, "u6": 16}
	view := func(mod func([]model.NodeStatus)) *clusterView {
		ns := moveNodes() // node1..3 alive, node4 dead
		for i := range ns {
			ns[i].Drained = ns[i].Name == "node1"
		}
		if mod != nil {
			mod(ns)
		}
		return &clusterView{View: plan.View{Self: "node1", Nodes: ns, Volumes: vols},
			Moves: map[string]volumes.StoredMove{"u6": {Move: model.Move{From: "node1", To: "node1", Phase: model.MoveRequested, Updated: now}}}}
	}
	summary := func(ms []drainMove) []string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s>%s@%d", m.Vol.Name, m.To, m.Epoch))
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		name  string
		mod   func([]model.NodeStatus)
		want  []string
		stuck int
	}{
		{"node1 drained: v1 and v2 go to node3 (node2 owns v4)", nil, []string{"v1>node3@11", "v2>node3@12"}, 0},
		{"node3 drained too: node2", func(ns []model.NodeStatus) { ns[0].Drained = true }, []string{"v1>node2@11", "v2>node2@12"}, 0},
		{"every other node drained or dead: stuck", func(ns []model.NodeStatus) { ns[0].Drained, ns[2].Drained = true, true }, nil, 2},
		{"node1 not drained: nothing", func(ns []model.NodeStatus) { ns[1].Drained = false }, nil, 0},
	} {
		v := view(c.mod)
		moves, stuck := drainMoves(v, held, now)
		if got := summary(moves); !slices.Equal(got, c.want) || len(stuck) != c.stuck {
			t.Errorf("%s: moves %q stuck %q, want %q and %d stuck", c.name, got, stuck, c.want, c.stuck)
		}
	}
}

// drainState and drainEnded: a drain --wait ends when the node owns no
// volume and no move away from it (asked since the drain) is under way;
// a failed move ends it with the failure; a move from before the drain
// does not count.
func TestDrainEnded(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	nodes := moveNodes()
	for i := range nodes {
		if nodes[i].Name == "node1" {
			nodes[i].Drained, nodes[i].DrainedSince = true, now.Add(-time.Minute)
		}
	}
	vol := model.Volume{UUID: "u1", Name: "v1", Owner: "node2", State: model.VolumeReady}
	move := func(phase string, asked time.Time) map[string]volumes.StoredMove {
		return map[string]volumes.StoredMove{"u1": {Move: model.Move{From: "node1", To: "node2", Phase: phase, Asked: asked, Updated: now, Error: "x"}}}
	}
	for _, c := range []struct {
		name   string
		owner  string
		moves  map[string]volumes.StoredMove
		done   bool
		failed bool
	}{
		{"still the record owner", "node1", nil, false, false},
		{"moved, old owner still draining", "node2", move(model.MoveResigned, now), false, false},
		{"moved and done", "node2", move(model.MoveDone, now), true, false},
		{"move failed", "node2", move(model.MoveFailed, now), false, true},
		{"a failed move from before the drain", "node2", move(model.MoveFailed, now.Add(-time.Hour)), true, false},
	} {
		v := vol
		v.Owner = c.owner
		out := drainState(&clusterView{View: plan.View{Self: "node3", Nodes: nodes, Volumes: []model.Volume{v}}, Moves: c.moves}, nodes[1], now)
		done, failed := drainEnded(out)
		if done != c.done || (failed != nil) != c.failed {
			t.Errorf("%s: done %v failed %+v, want %v, %v (%+v)", c.name, done, failed, c.done, c.failed, out)
		}
	}
}
