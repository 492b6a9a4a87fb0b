package clusterplane

import (
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// leaderTransferee: the leader that owns volumes hands the leadership to
// the voting, healthy, alive member owning the fewest (then the first
// name), only when that one owns fewer; never to a learner, an unhealthy
// member or a dead node; a leader that owns no more than every other
// keeps it.
func TestLeaderTransferee(t *testing.T) {
	ms := func(mod func([]model.MemberStatus)) []model.MemberStatus {
		out := []model.MemberStatus{{ID: "a1", Name: "a", Healthy: true, Leader: true}, {ID: "b2", Name: "b", Healthy: true}, {ID: "c3", Name: "c", Healthy: true}}
		if mod != nil {
			mod(out)
		}
		return out
	}
	nodes := func(dead ...string) []model.NodeStatus {
		var out []model.NodeStatus
		for _, n := range []string{"a", "b", "c"} {
			out = append(out, model.NodeStatus{Node: model.Node{Name: n}, Alive: true})
		}
		for i := range out {
			for _, d := range dead {
				if out[i].Name == d {
					out[i].Alive = false
				}
			}
		}
		return out
	}
	vols := func(owners ...string) []model.Volume {
		var out []model.Volume
		for _, o := range owners {
			out = append(out, model.Volume{Owner: o, State: model.VolumeReady})
		}
		return out
	}
	for _, c := range []struct {
		name    string
		members []model.MemberStatus
		nodes   []model.NodeStatus
		vols    []model.Volume
		want    string
	}{
		{"a owns one, b and c none: b (first name)", ms(nil), nodes(), vols("a"), "b"},
		{"b owns one: c", ms(nil), nodes(), vols("a", "b"), "c"},
		{"every node owns one: keep", ms(nil), nodes(), vols("a", "b", "c"), ""},
		{"a owns none: keep", ms(nil), nodes(), vols("b"), ""},
		{"a owns two, b and c one each: b", ms(nil), nodes(), vols("a", "a", "b", "c"), "b"},
		{"b a learner: c", ms(func(m []model.MemberStatus) { m[1].Learner = true }), nodes(), vols("a"), "c"},
		{"b unhealthy: c", ms(func(m []model.MemberStatus) { m[1].Healthy = false }), nodes(), vols("a"), "c"},
		{"b's node dead: c", ms(nil), nodes("b"), vols("a"), "c"},
		{"no other voting member: keep", ms(func(m []model.MemberStatus) { m[1].Learner, m[2].Healthy = true, false }), nodes(), vols("a"), ""},
		{"a volume being created does not count", ms(nil), nodes(), []model.Volume{{Owner: "a", State: model.VolumeCreating}}, ""},
	} {
		got := ""
		if m := leaderTransferee("a", c.members, c.nodes, c.vols); m != nil {
			got = m.Name
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
