package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// TestReprotect: a member whose node has been down for down_out_interval
// moves to a free drive in a domain that keeps the group's rule, one slot
// at a time, never while a replace or task runs, never while the engine
// counts it active; every "not now" says why.
func TestReprotect(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	const iv = 10 * time.Minute
	failedB := model.VolumeStatus{State: "degraded", Members: []model.VolumeMemberStatus{
		{Slot: 0, Role: "active"}, {Slot: 1, Role: "active"}, {Slot: 2, Role: "failed", Failure: "unreachable"}, {Slot: 3, Role: "failed", Failure: "unreachable"},
		{Slot: 4, Role: "active"}, {Slot: 5, Role: "active"}}}
	// base: 4+2 on a, b, c (two each, owner a), node e alive with three
	// free drives, b down since 11 minutes.
	base := func() (View, model.Volume) {
		v, vol := replaceView(true, "a", "c")
		for i := range vol.Members {
			vol.Members[i].UUID = us(byte(20 + i))
		}
		v.Volumes = []model.Volume{vol}
		v.Nodes[1].Alive = false
		return v, vol
	}
	downB := map[string]time.Time{"b": now.Add(-11 * time.Minute)}
	for _, tc := range []struct {
		name     string
		change   func(*View, *model.Volume, *model.VolumeStatus, map[string]time.Time)
		interval time.Duration
		fail     bool               // want Fail of want
		want     model.VolumeMember // zero: no replace or fail
		why      string             // substring of Why
	}{
		{name: "b down past the interval: slot 2 to e", interval: iv,
			want: model.VolumeMember{Slot: 2, Node: "e", Domain: "e", Drive: "e-d1"}},
		{name: "every node alive", interval: iv, change: func(v *View, _ *model.Volume, _ *model.VolumeStatus, _ map[string]time.Time) {
			v.Nodes[1].Alive = true
		}},
		{name: "b down for 4 min", interval: iv, change: func(_ *View, _ *model.Volume, _ *model.VolumeStatus, d map[string]time.Time) {
			d["b"] = now.Add(-4 * time.Minute)
		}, why: "slot 2: node b down since 2026-12-05T11:56:00Z; replaced at 2026-12-05T12:06:00Z (down_out_interval 10m0s)"},
		{name: "b first seen down now", interval: iv, change: func(_ *View, _ *model.Volume, _ *model.VolumeStatus, d map[string]time.Time) {
			delete(d, "b")
		}, why: "node b down since 2026-12-05T12:00:00Z; replaced at 2026-12-05T12:10:00Z"},
		{name: "off", interval: 0, why: "re-protection of down nodes is off (down_out_interval 0)"},
		{name: "down node: a spare first", interval: iv, change: func(v *View, _ *model.Volume, _ *model.VolumeStatus, _ map[string]time.Time) {
			v.Nodes[3].Drives[2].Spare = true
		}, want: model.VolumeMember{Slot: 2, Node: "e", Domain: "e", Drive: "e-d3"}},
		{name: "io-error on live c: its spare at once", interval: iv, change: func(v *View, _ *model.Volume, st *model.VolumeStatus, _ map[string]time.Time) {
			v.Nodes[1].Alive = true
			st.Members[2], st.Members[3] = model.VolumeMemberStatus{Slot: 2, Role: "active"}, model.VolumeMemberStatus{Slot: 3, Role: "active"}
			st.Members[4] = model.VolumeMemberStatus{Slot: 4, Role: "failed", Failure: "io-error"}
			v.Nodes[3].Drives[1].Spare = true
		}, want: model.VolumeMember{Slot: 4, Node: "e", Domain: "e", Drive: "e-d2"}},
		{name: "admin fail, interval off: a spare all the same", interval: 0, change: func(v *View, _ *model.Volume, st *model.VolumeStatus, _ map[string]time.Time) {
			v.Nodes[1].Alive = true
			st.Members[2], st.Members[3] = model.VolumeMemberStatus{Slot: 2, Role: "active"}, model.VolumeMemberStatus{Slot: 3, Role: "active"}
			st.Members[4] = model.VolumeMemberStatus{Slot: 4, Role: "failed", Failure: "admin"}
			v.Nodes[3].Drives[0].Spare = true
		}, want: model.VolumeMember{Slot: 4, Node: "e", Domain: "e", Drive: "e-d1"}},
		{name: "io-error, free drives but no spare", interval: iv, change: func(v *View, _ *model.Volume, st *model.VolumeStatus, _ map[string]time.Time) {
			v.Nodes[1].Alive = true
			st.Members[2], st.Members[3] = model.VolumeMemberStatus{Slot: 2, Role: "active"}, model.VolumeMemberStatus{Slot: 3, Role: "active"}
			st.Members[4] = model.VolumeMemberStatus{Slot: 4, Role: "failed", Failure: "io-error"}
		}, why: "slot 4 failed (io-error): no spare fits; fabraid volume replace picks any free drive"},
		{name: "unreachable on a live node: no spare (it returns)", interval: iv, change: func(v *View, _ *model.Volume, st *model.VolumeStatus, _ map[string]time.Time) {
			v.Nodes[1].Alive = true
			v.Nodes[3].Drives[0].Spare = true
		}},
		{name: "slot 2's replace pending", interval: iv, change: func(_ *View, vol *model.Volume, _ *model.VolumeStatus, _ map[string]time.Time) {
			vol.Members[2] = model.VolumeMember{Slot: 2, Node: "e", Domain: "e", Drive: "e-d1"}
		}, why: "slot 2 is being replaced (e:e-d1)"},
		{name: "rebuild runs", interval: iv, change: func(_ *View, _ *model.Volume, st *model.VolumeStatus, _ map[string]time.Time) {
			st.Task, st.Progress = "rebuild", 42
		}, why: "waits for the running rebuild"},
		{name: "slot 2 replaced: slot 3 to e next", interval: iv, change: func(v *View, vol *model.Volume, st *model.VolumeStatus, _ map[string]time.Time) {
			vol.Members[2] = model.VolumeMember{Slot: 2, Node: "e", Domain: "e", Drive: "e-d1", UUID: us(40)}
			v.Volumes = []model.Volume{*vol}
			st.Members[2].Role = "active"
		}, want: model.VolumeMember{Slot: 3, Node: "e", Domain: "e", Drive: "e-d2"}},
		{name: "engine counts b's members active: fail slot 2", interval: iv, change: func(_ *View, _ *model.Volume, st *model.VolumeStatus, _ map[string]time.Time) {
			st.Members[2].Role, st.Members[3].Role = "active", "active"
		}, fail: true, want: model.VolumeMember{Slot: 2, Node: "b", Domain: "b", Drive: "b-d1", UUID: us(22)},
			why: "slot 2: node b down since 2026-12-05T11:49:00Z: failing it before its replace"},
		{name: "no fitting drive (no e)", interval: iv, change: func(v *View, _ *model.Volume, _ *model.VolumeStatus, _ map[string]time.Time) {
			v.Nodes = v.Nodes[:3]
		}, why: "slot 2: node b down since 2026-12-05T11:49:00Z: no replacement drive"},
		{name: "not ready", interval: iv, change: func(_ *View, vol *model.Volume, _ *model.VolumeStatus, _ map[string]time.Time) {
			vol.State = model.VolumeDeleting
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, vol := base()
			st := failedB
			st.Members = append([]model.VolumeMemberStatus(nil), failedB.Members...)
			down := map[string]time.Time{}
			for k, x := range downB {
				down[k] = x
			}
			if tc.change != nil {
				tc.change(&v, &vol, &st, down)
			}
			got := Reprotect(v, vol, st, down, now, tc.interval)
			act := tc.want != model.VolumeMember{}
			if got.Fail != (act && tc.fail) || got.Replace != (act && !tc.fail) || got.Member != tc.want {
				t.Errorf("Reprotect = %+v, want fail %v / replace of %+v", got, tc.fail, tc.want)
			}
			if tc.why == "" && got.Why != "" || !strings.Contains(got.Why, tc.why) {
				t.Errorf("Why = %q, want %q", got.Why, tc.why)
			}
		})
	}
}

// TestSpares: a spare is no new volume's member, and a replacement takes
// a fitting spare before any other free drive, the old member's node
// included; SpareReplacement takes spares only.
func TestSpares(t *testing.T) {
	v, vol := replaceView(true)
	v.Nodes[3].Drives[1].Spare = true // e-d2
	for _, n := range PlacementNodes(v) {
		for _, d := range n.Free {
			if d.ID == "e-d2" {
				t.Errorf("PlacementNodes offers spare e-d2 to new volumes")
			}
		}
	}
	if m, err := Replacement(v, vol, 3, "", ""); err != nil || m.Drive != "e-d2" {
		t.Errorf("slot 3 (b-d2) with b-d3 free and spare e-d2: %+v, %v; want the spare", m, err)
	}
	if m, err := Replacement(v, vol, 3, "b", ""); err != nil || m.Drive != "b-d3" {
		t.Errorf("--node b: %+v, %v", m, err)
	}
	v.Nodes[3].Drives[1].Spare = false
	if _, err := SpareReplacement(v, vol, 3); err == nil || !strings.Contains(err.Error(), "spares: none") {
		t.Errorf("SpareReplacement with no spare: %v", err)
	}
}
