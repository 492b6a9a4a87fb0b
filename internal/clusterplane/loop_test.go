package clusterplane

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
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

// TestWatchKicksAfterCopy: the loop's watch feeds the view's copy and
// kicks a pass only once the copy holds the change, so the kicked pass
// reads it: at every kick (read in the kick itself, before the watch goes
// on), the registry read through the returned reader already lists the
// node whose registration kicked it.
func TestWatchKicksAfterCopy(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	c := &clusterLoop{}
	var mu sync.Mutex
	var kv clientv3.KV // nil until watch returned: the first list's kick reads nothing
	seen := make(chan string, 16)
	r := c.watch(cli, "c", func() {
		mu.Lock()
		r := kv
		mu.Unlock()
		if r == nil {
			return
		}
		last := ""
		if resp, err := r.Get(ctx, keys.NodesPrefix, clientv3.WithPrefix()); err == nil && len(resp.Kvs) > 0 {
			last = string(resp.Kvs[len(resp.Kvs)-1].Key)
		}
		seen <- last
	})
	mu.Lock()
	kv = r
	mu.Unlock()
	for c.cache.Revision() == 0 { // the first list, and its kick, done
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	for len(seen) > 0 {
		<-seen
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		if _, err := cli.Put(ctx, keys.Node(name), `{"name":"`+name+`"}`); err != nil {
			t.Fatal(err)
		}
		if got := <-seen; got != keys.Node(name) {
			t.Fatalf("kicked by %s's registration, the view's reader lists %q last", name, got)
		}
	}
}
