package scope

import (
	"encoding/json"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

const (
	mine   = "11111111-1111-4111-8111-111111111111" // c holds a member
	other  = "22222222-2222-4222-8222-222222222222" // a and b only, attached to a
	fresh  = "33333333-3333-4333-8333-333333333333" // not in the last view
	moving = "44444444-4444-4444-8444-444444444444" // moves from a to c
)

func record(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKicks(t *testing.T) {
	vols := []model.Volume{
		{UUID: mine, Owner: "a", Attach: &model.AttachList{Nodes: []string{"a"}},
			Members: []model.VolumeMember{{Node: "a"}, {Node: "c"}}},
		{UUID: other, Owner: "a", Attach: &model.AttachList{Nodes: []string{"a"}},
			Members: []model.VolumeMember{{Node: "a"}, {Node: "b"}}},
		{UUID: moving, Owner: "c", Attach: &model.AttachList{Nodes: []string{}},
			Members: []model.VolumeMember{{Node: "a"}, {Node: "b"}}},
	}
	moves := []model.Move{{Volume: moving, From: "a", To: "c"}}
	in := Of("c", vols, moves)
	elsewhere := model.Volume{UUID: fresh, Owner: "a", Attach: &model.AttachList{Nodes: []string{"b"}}, Members: []model.VolumeMember{{Node: "b"}}}
	withMember := elsewhere
	withMember.Members = append(withMember.Members, model.VolumeMember{Node: "c"})
	everywhere := elsewhere
	everywhere.Attach = nil
	for _, tc := range []struct {
		name string
		ev   Event
		want bool
	}{
		{"a node registers", Event{Key: keys.Node("d"), Value: []byte("{}")}, true},
		{"a node's alive key goes", Event{Key: keys.Alive("b"), Delete: true}, true},
		{"a host key changes", Event{Key: keys.HostKey("b"), Value: []byte("x")}, true},
		{"a node is drained", Event{Key: keys.Drain("a"), Value: []byte("{}")}, true},
		{"owner key of a volume with a member here", Event{Key: keys.Owner(mine), Value: []byte("x")}, true},
		{"owner key of a volume elsewhere", Event{Key: keys.Owner(other), Value: []byte("x")}, false},
		{"owner key of a volume elsewhere vanishes (any node may take it over)", Event{Key: keys.Owner(other), Delete: true}, true},
		{"a node's owner session ends", Event{Key: keys.OwnerSession("b"), Delete: true}, true},
		{"a node publishes its owner session", Event{Key: keys.OwnerSession("b"), Value: []byte("1")}, false},
		{"record of a volume with a member here", Event{Key: keys.Volume(mine), Value: record(t, vols[0])}, true},
		{"record of a volume elsewhere", Event{Key: keys.Volume(other), Value: record(t, vols[1])}, false},
		{"record of a volume elsewhere deleted", Event{Key: keys.Volume(other), Delete: true}, false},
		{"record of a volume with a member here deleted", Event{Key: keys.Volume(mine), Delete: true}, true},
		{"a new volume elsewhere", Event{Key: keys.Volume(fresh), Value: record(t, elsewhere)}, false},
		{"a new volume with a member here", Event{Key: keys.Volume(fresh), Value: record(t, withMember)}, true},
		{"a new volume attached to every node", Event{Key: keys.Volume(fresh), Value: record(t, everywhere)}, true},
		{"a volume elsewhere moved to this node", Event{Key: keys.Volume(other), Value: record(t, model.Volume{UUID: other, Owner: "c",
			Attach: &model.AttachList{Nodes: []string{"a"}}})}, true},
		{"an unreadable record", Event{Key: keys.Volume(fresh), Value: []byte("{")}, true},
		{"fence acknowledgement for a volume with a member here", Event{Key: keys.Fence(mine, "b"), Value: []byte("{}")}, true},
		{"fence acknowledgement for a volume elsewhere", Event{Key: keys.Fence(other, "b"), Value: []byte("{}")}, false},
		{"a move of a volume this node is moving to", Event{Key: keys.Move(moving), Value: record(t, moves[0])}, true},
		{"a new move to this node", Event{Key: keys.Move(other), Value: record(t, model.Move{Volume: other, From: "a", To: "c"})}, true},
		{"a new move elsewhere", Event{Key: keys.Move(other), Value: record(t, model.Move{Volume: other, From: "a", To: "b"})}, false},
		{"acknowledgement of this node's pending host key", Event{Key: keys.HostKeyAck("c", "b"), Value: []byte("{}")}, true},
		{"acknowledgement of another node's pending host key", Event{Key: keys.HostKeyAck("b", "c"), Value: []byte("{}")}, false},
		{"acknowledgement of a node whose name starts with this one's", Event{Key: keys.HostKeyAck("cd", "b"), Value: []byte("{}")}, false},
		{"a status", Event{Key: keys.VolumeStatus(mine), Value: []byte("{}")}, false},
		{"a path list", Event{Key: keys.Paths("a"), Value: []byte("{}")}, false},
		{"a request", Event{Key: keys.Request(mine, "1"), Value: []byte("{}")}, false},
	} {
		if got := in.Kicks(tc.ev); got != tc.want {
			t.Errorf("%s (%s): kicks %v, want %v", tc.name, tc.ev.Key, got, tc.want)
		}
	}
}

// Before its first view a node is interested in every volume.
func TestKicksWithoutView(t *testing.T) {
	in := Interest{Self: "c"}
	for _, ev := range []Event{
		{Key: keys.Owner(other), Value: []byte("x")},
		{Key: keys.Volume(other), Delete: true},
		{Key: keys.Fence(other, "b"), Value: []byte("{}")},
		{Key: keys.Move(other), Delete: true},
	} {
		if !in.Kicks(ev) {
			t.Errorf("%s: no kick without a view", ev.Key)
		}
	}
}

func FuzzKicks(f *testing.F) {
	f.Add(keys.Volume(fresh), []byte(`{"owner":"c"}`), false)
	f.Add(keys.Move(fresh), []byte(`{"to":"c"}`), false)
	f.Add(keys.Fence(fresh, "a"), []byte{}, true)
	in := Of("c", nil, nil)
	f.Fuzz(func(t *testing.T, key string, value []byte, del bool) {
		in.Kicks(Event{Key: key, Value: value, Delete: del}) // must not panic
	})
}
