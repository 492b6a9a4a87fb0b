package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// replaceView: a 4+2 volume v (owner a) with two members on each of a, b,
// c (drives d1, d2); each node has a free d3 except those named in
// noFree; node e (alive, domain e) has free drives when withE.
func replaceView(withE bool, noFree ...string) (View, model.Volume) {
	v := model.Volume{Version: 1, UUID: us(9), Name: "v", K: 4, M: 2, Groups: 1, Owner: "a", State: model.VolumeReady, MemberSize: 1 << 30,
		Members: members("a-d1", "a-d2", "b-d1", "b-d2", "c-d1", "c-d2")}
	var ns []model.NodeStatus
	names := []string{"a", "b", "c"}
	if withE {
		names = append(names, "e")
	}
	for _, name := range names {
		n := node(name, true)
		for _, x := range noFree {
			if x == name {
				n.Drives = n.Drives[:2]
			}
		}
		ns = append(ns, n)
	}
	return View{Self: "b", Nodes: ns, Volumes: []model.Volume{v}}, v
}

// TestReplacement: the new member keeps at most M members of the group
// in one domain, prefers the old member's node, never moves a member into
// or out of the owner's domain, and every refusal lists the free drives
// with the reason each does not fit.
func TestReplacement(t *testing.T) {
	v, vol := replaceView(false)
	if m, err := Replacement(v, vol, 3, "", ""); err != nil || m != (model.VolumeMember{Slot: 3, Node: "b", Domain: "b", Drive: "b-d3"}) {
		t.Errorf("slot 3 (b-d2): %+v, %v; want b-d3 (same node)", m, err)
	}
	// Only c has a free drive: c holds 2 of the group already.
	v, vol = replaceView(false, "a", "b")
	_, err := Replacement(v, vol, 3, "", "")
	if !errors.Is(err, ErrNoReplacement) || !strings.Contains(err.Error(), "no free drive in a domain that keeps 4+2 with at most 2 chunks per domain") ||
		!strings.Contains(err.Error(), "c:c-d3 (domain c holds 2 of the group's members already)") {
		t.Errorf("slot 3 with only c free: %v", err)
	}
	if m, err := Replacement(v, vol, 4, "", ""); err != nil || m.Drive != "c-d3" {
		t.Errorf("slot 4 (c-d1) with c-d3 free: %+v, %v", m, err)
	}
	// A new domain e: fine for b's member, not for the owner a's.
	v, vol = replaceView(true, "a", "b")
	if m, err := Replacement(v, vol, 2, "e", ""); err != nil || m != (model.VolumeMember{Slot: 2, Node: "e", Domain: "e", Drive: "e-d1"}) {
		t.Errorf("slot 2 --node e: %+v, %v", m, err)
	}
	if m, err := Replacement(v, vol, 2, "", ""); err != nil || m.Node != "e" {
		t.Errorf("slot 2, c full, e free: %+v, %v; want e", m, err)
	}
	if _, err := Replacement(v, vol, 0, "e", ""); err == nil || !strings.Contains(err.Error(), "owner's domain a") {
		t.Errorf("slot 0 (owner's domain) to e: %v", err)
	}
	if m, err := Replacement(v, vol, 2, "e", "e-d2"); err != nil || m.Drive != "e-d2" {
		t.Errorf("--node e --drive e-d2: %+v, %v", m, err)
	}
	if _, err := Replacement(v, vol, 2, "e", "nope"); err == nil || !strings.Contains(err.Error(), `matching node "e" drive "nope": none`) {
		t.Errorf("unknown drive: %v", err)
	}
	// Too small; out of range; a dead node offers nothing.
	v, vol = replaceView(false)
	vol.MemberSize = 2 << 30
	if _, err := Replacement(v, vol, 3, "", ""); err == nil || !strings.Contains(err.Error(), "b:b-d3 (1073741824 bytes, members need 2147483648)") {
		t.Errorf("small drive: %v", err)
	}
	if _, err := Replacement(v, vol, 6, "", ""); err == nil || !strings.Contains(err.Error(), "slots 0..5, not 6") {
		t.Errorf("slot 6: %v", err)
	}
	v, vol = replaceView(false)
	v.Nodes[1].Alive = false
	if m, err := Replacement(v, vol, 3, "", ""); err == nil {
		t.Errorf("b dead, only b could take slot 3 without a third member in a or c... got %+v", m)
	}
}
