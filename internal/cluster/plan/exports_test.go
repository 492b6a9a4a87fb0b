package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/placement"
)

// refuse marks node name of v as exporting nothing (require_auth and no
// DH-HMAC-CHAP in its target).
func refuse(v *View, name string) {
	for i := range v.Nodes {
		if v.Nodes[i].Name == name {
			v.Nodes[i].Exports, v.Nodes[i].ExportsWhy = model.ExportsRefused, "exports refused: no DH-HMAC-CHAP"
		}
	}
}

// TestNodesThatCannotExport: a node that exports nothing offers no drive
// to placement or replace, is refused by --nodes with its reason, is
// named when a placement fails without it, and never takes a volume over.
func TestNodesThatCannotExport(t *testing.T) {
	v := view("a")
	refuse(&v, "c")
	for _, n := range PlacementNodes(v) {
		if n.Name == "c" {
			t.Errorf("PlacementNodes offers c, which exports nothing: %+v", n)
		}
	}
	now := time.Now()
	if _, err := NewVolume(v, placement.Request{Name: "v3", K: 2, M: 1, Nodes: []string{"a", "b", "c"}}, u(3), now); err == nil ||
		!strings.Contains(err.Error(), "node c exports nothing (--nodes): exports refused: no DH-HMAC-CHAP") {
		t.Errorf("--nodes with c: %v", err)
	}
	if _, err := NewVolume(v, placement.Request{Name: "v3", K: 2, M: 1}, u(3), now); err == nil ||
		!strings.Contains(err.Error(), "left out: c, which export nothing") {
		t.Errorf("2+1 over a, b and a refusing c: %v", err)
	}
	v.Nodes = append(v.Nodes, node("e", true))
	if got, err := NewVolume(v, placement.Request{Name: "v3", K: 2, M: 1}, u(3), now); err != nil || got.Owner == "c" {
		t.Errorf("2+1 with e: %+v %v", got, err)
	} else {
		for _, m := range got.Members {
			if m.Node == "c" {
				t.Errorf("member on c: %+v", got.Members)
			}
		}
	}
	if _, err := Replacement(v, v.Volumes[0], 1, "c", ""); err == nil {
		t.Error("a replacement on c, which exports nothing")
	}
	// v1's owner a is gone; c would be chosen (see TestChooseOwner), but
	// it exports nothing: b.
	w := view("c")
	refuse(&w, "c")
	if got := ChooseOwner(w, w.Volumes[0]); got != "b" {
		t.Errorf("ChooseOwner with c refusing: %q, want b", got)
	}
	refuse(&w, "b")
	if got := ChooseOwner(w, w.Volumes[0]); got != "" {
		t.Errorf("ChooseOwner with b and c refusing: %q, want none (the volume waits)", got)
	}
}
