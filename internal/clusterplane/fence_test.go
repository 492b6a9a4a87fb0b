package clusterplane

import (
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
)

// TestExportHolders: the drives follow the owner key; while a volume has
// no key they stay with the last holder seen (a lapsed owner that acquires
// again keeps its member connections), a new holder replaces it, nothing
// seen means nobody, and a deleted volume is forgotten.
func TestExportHolders(t *testing.T) {
	c := &clusterLoop{}
	v := &clusterView{View: plan.View{Volumes: []model.Volume{{UUID: "u1"}, {UUID: "u2"}}}}
	key := func(node string, e owner.Epoch) owner.Key {
		return owner.Key{Record: owner.Record{Node: node}, Epoch: e}
	}
	if ks := exportHolders(c, v, map[string]owner.Key{"u1": key("a", 5)}); ks["u1"] != (plan.OwnerKey{Node: "a", Epoch: 5}) || len(ks) != 1 {
		t.Fatalf("with a's key: %+v", ks)
	}
	if ks := exportHolders(c, v, nil); ks["u1"] != (plan.OwnerKey{Node: "a", Epoch: 5}) || len(ks) != 1 {
		t.Fatalf("key lapsed: %+v, want a at 5 kept, u2 to nobody", ks)
	}
	if ks := exportHolders(c, v, map[string]owner.Key{"u1": key("b", 9)}); ks["u1"] != (plan.OwnerKey{Node: "b", Epoch: 9}) {
		t.Fatalf("b's key: %+v", ks)
	}
	v.Volumes = v.Volumes[1:]
	exportHolders(c, v, nil)
	v.Volumes = append(v.Volumes, model.Volume{UUID: "u1"})
	if ks := exportHolders(c, v, nil); len(ks) != 0 {
		t.Fatalf("u1 deleted and made again: %+v, want nobody", ks)
	}
}
