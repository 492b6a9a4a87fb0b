package clusterplane

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
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
	now := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	if err := checkMove(vol, nodes, "node2", "node1", nil, now); err != nil {
		t.Fatal(err)
	}
	if err := checkMove(vol, nodes, "node2", "node1", &model.Move{Phase: model.MoveDone}, now); err != nil {
		t.Fatalf("after a finished move: %v", err)
	}
	// A move not over blocks only while its old owner is alive, the
	// record still names its target and it changed within moveStale.
	moving := vol
	moving.Owner = "node2"
	cur := &model.Move{From: "node1", To: "node2", Phase: model.MoveResigned, Updated: now.Add(-time.Minute)}
	if err := checkMove(moving, nodes, "node3", "node2", cur, now); err == nil || !strings.Contains(err.Error(), "already under way") {
		t.Fatalf("move under way: %v", err)
	}
	for name, c := range map[string]struct {
		m     model.Move
		owner string
	}{
		"old owner down": {model.Move{From: "node4", To: "node2", Phase: model.MoveResigned, Updated: now}, "node2"},
		"record changed": {model.Move{From: "node1", To: "node3", Phase: model.MoveRequested, Updated: now}, "node2"},
		"stale":          {model.Move{From: "node1", To: "node2", Phase: model.MoveRequested, Updated: now.Add(-moveStale - time.Second)}, "node2"},
	} {
		if moveUnderWay(&c.m, model.Volume{Owner: c.owner}, nodes, now) {
			t.Errorf("%s: counted as under way", name)
		}
	}
	deadOwner := vol
	deadOwner.Owner = "node4"
	creating := vol
	creating.State = model.VolumeCreating
	noAddr := moveNodes()
	noAddr[2].StorageAddresses = nil
	drained := moveNodes()
	drained[2].Drained = true
	for _, c := range []struct {
		name   string
		vol    model.Volume
		nodes  []model.NodeStatus
		target string
		key    string
		want   string
	}{
		{"no target", vol, nodes, "", "node1", "which node"},
		{"unknown node", vol, nodes, "node9", "node1", "node node9 is not in the cluster (nodes: node1, node2, node3, node4)"},
		{"dead node", vol, nodes, "node4", "node1", "node node4 is down"},
		{"already owner", vol, nodes, "node1", "node1", "node node1 already owns it"},
		{"not ready", creating, nodes, "node2", "node1", "state creating: only a ready volume can move"},
		{"owner down", deadOwner, nodes, "node2", "", `owner "node4" is not running: failover`},
		{"owner does not hold it", vol, nodes, "node2", "", "does not hold it now"},
		{"no address", vol, noAddr, "node2", "node1", "no storage address"},
		{"drained node", vol, drained, "node2", "node1", "node node2 is drained"},
	} {
		err := checkMove(c.vol, c.nodes, c.target, c.key, nil, now)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// The old owner's decision to remove its export: only once the record
// owner serves under the current key at a newer epoch, exported, and no
// live node depends on the old path, or consumerWait after it serves.
func TestMayUnexport(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	h := handover{epoch: 10, frozen: true, resigned: true, since: t0}
	serving := model.VolumeStatus{Owner: "n", State: "optimal", Epoch: 11, Exported: true}
	facts := func(mod func(*handoverFacts)) handoverFacts {
		st := serving
		f := handoverFacts{Self: "o", RecordOwner: "n", KeyNode: "n", KeyEpoch: 11, Status: &st, Now: t0.Add(5 * time.Second)}
		if mod != nil {
			mod(&f)
		}
		return f
	}
	for _, c := range []struct {
		name string
		h    handover
		f    handoverFacts
		want bool
	}{
		{"served, every path moved", h, facts(nil), true},
		{"no status yet", h, facts(func(f *handoverFacts) { f.Status = nil }), false},
		{"target's engine not running", h, facts(func(f *handoverFacts) { f.Status.State = "stopped"; f.Status.Epoch = 0 }), false},
		{"not exported yet", h, facts(func(f *handoverFacts) { f.Status.Exported = false }), false},
		{"stale status of an older tenure", h, facts(func(f *handoverFacts) { f.Status.Epoch = 9; f.KeyEpoch = 9 }), false},
		{"status epoch is not the key's", h, facts(func(f *handoverFacts) { f.KeyEpoch = 12 }), false},
		{"key not acquired yet", h, facts(func(f *handoverFacts) { f.KeyNode, f.KeyEpoch = "", 0 }), false},
		{"status of another node", h, facts(func(f *handoverFacts) { f.Status.Owner = "x" }), false},
		{"record owner is self (taken back)", h, facts(func(f *handoverFacts) { f.RecordOwner = "o" }), false},
		{"a consumer has no new path", h, facts(func(f *handoverFacts) { f.Pending = []string{"c"} }), false},
		{"failover's node serves instead", h, facts(func(f *handoverFacts) { f.RecordOwner, f.KeyNode, f.Status.Owner = "x", "x", "x" }), true},
	} {
		if got, why := mayUnexport(c.h, c.f); got != c.want || got != (why != "") {
			t.Errorf("%s: %v (%q), want %v", c.name, got, why, c.want)
		}
	}
	// A stuck consumer holds the export consumerWait after the target
	// was first seen serving, not longer.
	stuck := h
	stuck.served = t0
	f := facts(func(f *handoverFacts) { f.Pending = []string{"c"}; f.Now = t0.Add(consumerWait - time.Second) })
	if ok, _ := mayUnexport(stuck, f); ok {
		t.Fatal("stuck consumer: unexported before consumerWait")
	}
	f.Now = t0.Add(consumerWait)
	if ok, why := mayUnexport(stuck, f); !ok || !strings.Contains(why, "nodes c show no live path") {
		t.Fatalf("stuck consumer after consumerWait: %v %q", ok, why)
	}
}

// Which live nodes may still depend on the old owner's export.
func TestPendingConsumers(t *testing.T) {
	const uuid = "5e3c1f00-0000-4000-8000-000000000001"
	old := []string{"10.0.0.1"}
	v := &clusterView{Paths: map[string]model.NodePaths{}}
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		v.Nodes = append(v.Nodes, model.NodeStatus{Node: model.Node{Name: n}, Alive: n != "f"})
	}
	p := func(addr, state string) model.Path { return model.Path{Address: addr, State: state} }
	v.Paths["a"] = model.NodePaths{Volumes: map[string][]model.Path{uuid: {p("10.0.0.1", "live"), p("10.0.0.2", "live")}}} // both: fine
	v.Paths["b"] = model.NodePaths{Volumes: map[string][]model.Path{uuid: {p("10.0.0.1", "live"), p("10.0.0.2", "connecting")}}}
	v.Paths["c"] = model.NodePaths{Volumes: map[string][]model.Path{uuid: {p("10.0.0.2", "live")}}} // old dropped
	v.Paths["d"] = model.NodePaths{Volumes: map[string][]model.Path{}}                              // never consumed it
	// e publishes nothing (old fabraidd, stuck): pending; f is dead.
	if got := pendingConsumers(v, uuid, old); strings.Join(got, ",") != "b,e" {
		t.Fatalf("pending %v, want b (new path not live) and e (no paths published)", got)
	}
}

// TestManagerPlanCntlIDRange: a node's volume exports use the range of the
// controller-ID block in its own record, whatever the other records'
// join times (a record rewritten with a new join time moves nothing).
func TestManagerPlanCntlIDRange(t *testing.T) {
	nodes := moveNodes() // join order node1, node2, node3, node4
	for i, b := range []int{3, 1, 2, 0} {
		nodes[i].CntlIDBlock = b // node3 3, node1 1, node2 2, node4 none
	}
	for _, c := range []struct {
		self   string
		lo, hi uint16
	}{{"node1", 1, 1000}, {"node2", 1001, 2000}, {"node3", 2001, 3000}, {"node4", 0, 0}, {"nodeX", 0, 0}} {
		for _, joined := range []time.Time{{}, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} {
			ns := slices.Clone(nodes)
			for i := range ns {
				if ns[i].Name == "node2" && !joined.IsZero() {
					ns[i].Joined = joined // node2 "rejoins" last
				}
			}
			p := managerPlan(&clusterView{View: plan.View{Self: c.self, Nodes: ns}}, plan.Import{}, nil)
			if p.CntlIDMin != c.lo || p.CntlIDMax != c.hi {
				t.Errorf("%s (node2 joined %v): controller ids %d..%d, want %d..%d", c.self, joined, p.CntlIDMin, p.CntlIDMax, c.lo, c.hi)
			}
		}
	}
}
