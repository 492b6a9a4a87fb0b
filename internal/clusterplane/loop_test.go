package clusterplane

import (
	"maps"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
)

// TestKicks: before its first view the loop is kicked by every key it
// reads (never by statuses or tokens); from the view on, by the changes
// of its interest (scope), which includes the volumes it holds the key of
// even when their records name another owner.
func TestKicks(t *testing.T) {
	put := func(k string) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(k), Value: []byte("{}")}}
	}
	c := &clusterLoop{}
	for k, want := range map[string]bool{
		keys.Drain("b"):             true,
		keys.FenceVolume("u") + "c": true,
		keys.Volume("u"):            true,
		keys.Move("u"):              true,
		keys.VolumeStatus("u"):      false,
		keys.TokensPrefix + "x":     false,
	} {
		if got := c.kicks("c", put(k)); got != want {
			t.Errorf("before a view: kicks(%q) = %v, want %v", k, got, want)
		}
	}
	v := &clusterView{View: plan.View{Self: "c", Held: map[string]uint64{"held": 3},
		Volumes: []model.Volume{{UUID: "held", Owner: "b", Attach: &model.AttachList{Nodes: []string{"b"}}}, {UUID: "other", Owner: "a", Attach: &model.AttachList{Nodes: []string{"a"}}}}}}
	c.interest = interestOf(v)
	for k, want := range map[string]bool{
		keys.Owner("held"):              true,
		keys.FenceVolume("held") + "a":  true,
		keys.Owner("other"):             false,
		keys.FenceVolume("other") + "a": false,
		keys.Drain("b"):                 true,
	} {
		if got := c.kicks("c", put(k)); got != want {
			t.Errorf("with a view: kicks(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestDownSinceUpdate(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	nodes := []model.NodeStatus{{Node: model.Node{Name: "a"}, Alive: true}, {Node: model.Node{Name: "b"}}, {Node: model.Node{Name: "c"}}}
	got := downSinceUpdate(map[string]time.Time{"a": t0, "b": t0, "x": t0}, nodes, t0.Add(time.Minute))
	want := map[string]time.Time{"b": t0, "c": t0.Add(time.Minute)}
	if !maps.Equal(got, want) {
		t.Errorf("downSinceUpdate = %v, want %v (alive and unknown nodes dropped, b keeps its first instant, c starts now)", got, want)
	}
}

// TestDownClock: the cluster's down record times a dead node wherever
// there is one (a new owner goes on from the first owner's sight), this
// node's first sight otherwise; records are written for watched dead
// nodes without one and cleared for nodes alive again.
func TestDownClock(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	nodes := []model.NodeStatus{
		{Node: model.Node{Name: "a"}, Alive: true, DownSince: t0}, // back: clear
		{Node: model.Node{Name: "b"}, DownSince: t0},              // recorded
		{Node: model.Node{Name: "c"}},                             // dead, watched: mark
		{Node: model.Node{Name: "d"}},                             // dead, not watched
		{Node: model.Node{Name: "e"}, Alive: true},                // alive
	}
	local := map[string]time.Time{"b": t0.Add(9 * time.Minute), "c": t0.Add(time.Minute), "d": t0.Add(2 * time.Minute)}
	got := downClock(local, nodes)
	want := map[string]time.Time{"b": t0, "c": t0.Add(time.Minute), "d": t0.Add(2 * time.Minute)}
	if !maps.Equal(got, want) {
		t.Errorf("downClock = %v, want %v (b from the record, not this node's later sight)", got, want)
	}
	mark, clear := downRecords(nodes, func(n string) bool { return n != "d" })
	if len(mark) != 1 || mark[0] != "c" || len(clear) != 1 || clear[0] != "a" {
		t.Errorf("downRecords: mark %v clear %v, want [c] and [a]", mark, clear)
	}
}
