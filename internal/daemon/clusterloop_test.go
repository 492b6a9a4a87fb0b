package daemon

import (
	"maps"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

func TestKicks(t *testing.T) {
	for k, want := range map[string]bool{
		keys.Drain("b"):             true,
		keys.FenceVolume("u") + "c": true,
		keys.Volume("u"):            true,
		keys.VolumeStatus("u"):      false,
		keys.TokensPrefix + "x":     false,
	} {
		if got := kicks(k); got != want {
			t.Errorf("kicks(%q) = %v, want %v", k, got, want)
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
