package clusterplane

import (
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
)

// The volumes this node owns run with owner-domain journaling for the
// node's failure domain: its registry record's (failure_domain), the node
// name when the record has none.
func TestManagerPlanOwnerDomain(t *testing.T) {
	vol := model.Volume{Name: "v", State: model.VolumeReady, K: 2, M: 1, Groups: 1, Owner: "a",
		Members: []model.VolumeMember{{Slot: 0, Node: "a", Domain: "rack1"}, {Slot: 1, Node: "b", Domain: "b"}, {Slot: 2, Node: "c", Domain: "c"}}}
	imp := plan.Import{Volumes: []plan.Owned{{Volume: vol, UUID: [16]byte{1}}}}
	for _, c := range []struct {
		nodes []model.NodeStatus
		want  string
	}{
		{[]model.NodeStatus{{Node: model.Node{Name: "a", Domain: "rack1"}}, {Node: model.Node{Name: "b", Domain: "b"}}}, "rack1"},
		{nil, "a"},
	} {
		v := &clusterView{View: plan.View{Self: "a", Nodes: c.nodes}}
		p := managerPlan(v, imp, nil)
		if len(p.Volumes) != 1 || p.Volumes[0].OwnerDomain != c.want {
			t.Fatalf("nodes %v: planned volumes %+v, want owner domain %q", c.nodes, p.Volumes, c.want)
		}
	}
}
