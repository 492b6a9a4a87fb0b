package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

func moveNodes() []model.NodeStatus {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	n := func(name string, alive bool, joined int) model.NodeStatus {
		return model.NodeStatus{Node: model.Node{Name: name, StorageAddresses: []string{"10.0.0." + name[len(name)-1:]}, Joined: t0.Add(time.Duration(joined) * time.Minute)}, Alive: alive}
	}
	return []model.NodeStatus{n("node3", true, 2), n("node1", true, 0), n("node2", true, 1), n("node4", false, 3)}
}

func TestCheckMove(t *testing.T) {
	vol := model.Volume{Name: "vol0", Owner: "node1", State: model.VolumeReady}
	nodes := moveNodes()
	if err := checkMove(vol, nodes, "node2", nil); err != nil {
		t.Fatal(err)
	}
	if err := checkMove(vol, nodes, "node2", &Move{Phase: MoveDone}); err != nil {
		t.Fatalf("after a finished move: %v", err)
	}
	deadOwner := vol
	deadOwner.Owner = "node4"
	creating := vol
	creating.State = model.VolumeCreating
	noAddr := moveNodes()
	noAddr[2].StorageAddresses = nil
	for _, c := range []struct {
		name   string
		vol    model.Volume
		nodes  []model.NodeStatus
		target string
		cur    *Move
		want   string
	}{
		{"no target", vol, nodes, "", nil, "which node"},
		{"unknown node", vol, nodes, "node9", nil, "node node9 is not in the cluster (nodes: node1, node2, node3, node4)"},
		{"dead node", vol, nodes, "node4", nil, "node node4 is down"},
		{"already owner", vol, nodes, "node1", nil, "node node1 already owns it"},
		{"not ready", creating, nodes, "node2", nil, "state creating: only a ready volume can move"},
		{"owner down", deadOwner, nodes, "node2", nil, `owner "node4" is not running: failover`},
		{"under way", vol, nodes, "node3", &Move{From: "node1", To: "node2", Phase: MoveResigned}, "a move from node1 to node2 is already under way (phase resigned)"},
		{"no address", vol, noAddr, "node2", nil, "no storage address"},
	} {
		err := checkMove(c.vol, c.nodes, c.target, c.cur)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// Every phase of a move on each node, including the ways it is overtaken
// by failover.
func TestNextMoveStep(t *testing.T) {
	alive := func(down ...string) func(string) bool {
		return func(n string) bool {
			for _, d := range down {
				if d == n {
					return false
				}
			}
			return true
		}
	}
	m := func(phase string) Move { return Move{From: "o", To: "n", Epoch: 10, Phase: phase} }
	for _, c := range []struct {
		name string
		m    Move
		f    moveFacts
		want moveAction
	}{
		{"old owner drains", m(MoveRequested), moveFacts{Self: "o", KeyHolder: "o", KeyEpoch: 10, Alive: alive()}, moveDrain},
		{"target waits for the drain", m(MoveRequested), moveFacts{Self: "n", KeyHolder: "o", KeyEpoch: 10, Alive: alive()}, moveWait},
		{"bystander waits", m(MoveRequested), moveFacts{Self: "x", KeyHolder: "o", KeyEpoch: 10, Alive: alive()}, moveWait},
		{"target died before the drain", m(MoveRequested), moveFacts{Self: "o", KeyHolder: "o", KeyEpoch: 10, Alive: alive("n")}, moveAbandon},
		{"old owner re-acquired (new epoch)", m(MoveRequested), moveFacts{Self: "o", KeyHolder: "o", KeyEpoch: 12, Alive: alive()}, moveAbandon},
		{"failover took it", m(MoveRequested), moveFacts{Self: "o", KeyHolder: "x", KeyEpoch: 12, Alive: alive()}, moveAbandon},
		{"key lost before the drain", m(MoveRequested), moveFacts{Self: "n", Alive: alive("o")}, moveAbandon},
		{"target takes over", m(MoveResigned), moveFacts{Self: "n", Alive: alive()}, moveTakeOver},
		{"target resumes after Acquire", m(MoveResigned), moveFacts{Self: "n", KeyHolder: "n", KeyEpoch: 11, Alive: alive()}, moveTakeOver},
		{"old owner waits after resigning", m(MoveResigned), moveFacts{Self: "o", Alive: alive()}, moveWait},
		{"someone else acquired", m(MoveResigned), moveFacts{Self: "n", KeyHolder: "x", KeyEpoch: 11, Alive: alive()}, moveAbandon},
		{"old owner unexports once the target serves", m(MoveServing), moveFacts{Self: "o", KeyHolder: "n", KeyEpoch: 11, ServingEpoch: 11, Alive: alive()}, moveUnexport},
		{"old owner waits for the target's status", m(MoveServing), moveFacts{Self: "o", KeyHolder: "n", KeyEpoch: 11, Alive: alive()}, moveWait},
		{"old owner down: target finishes", m(MoveServing), moveFacts{Self: "n", KeyHolder: "n", KeyEpoch: 11, ServingEpoch: 11, Alive: alive("o")}, moveFinish},
		{"done", m(MoveDone), moveFacts{Self: "o", KeyHolder: "n", KeyEpoch: 11, Alive: alive()}, moveWait},
	} {
		got, why := nextMoveStep(c.m, c.f)
		if got != c.want {
			t.Errorf("%s: %v (%s), want %v", c.name, got, why, c.want)
		}
		if (got == moveAbandon) != (why != "") {
			t.Errorf("%s: reason %q with %v", c.name, why, got)
		}
	}
}

func TestNodeIndex(t *testing.T) {
	nodes := moveNodes()
	for name, want := range map[string]int{"node1": 0, "node2": 1, "node3": 2, "node4": 3, "nodeX": -1} {
		if got := nodeIndex(nodes, name); got != want {
			t.Errorf("%s: index %d, want %d", name, got, want)
		}
	}
	// Same join time: by name.
	nodes[0].Joined = nodes[1].Joined // node3 joins with node1
	if nodeIndex(nodes, "node3") != 1 || nodeIndex(nodes, "node2") != 2 {
		t.Errorf("tie not broken by name: node3 %d node2 %d", nodeIndex(nodes, "node3"), nodeIndex(nodes, "node2"))
	}
}
