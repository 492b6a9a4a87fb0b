package model

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestVolumeStatusDegraded(t *testing.T) {
	s := VolumeStatus{Members: []VolumeMemberStatus{
		{Slot: 0, Node: "a", Role: "active"},
		{Slot: 1, Node: "b", Role: "failed", Failure: "unreachable"},
		{Slot: 2, Node: "c", Role: "rebuilding"},
	}}
	got := s.Degraded()
	want := []VolumeMemberStatus{s.Members[1], s.Members[2]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Degraded = %+v, want %+v", got, want)
	}
}

// The JSON tags are the contract with other fabraid versions.
func TestVolumeJSONTags(t *testing.T) {
	b, _ := json.Marshal(Volume{Version: 1, UUID: "u", Name: "n", K: 4, M: 2, Groups: 1, Owner: "a", State: VolumeReady,
		MemberSize: 10, Members: []VolumeMember{{Slot: 0, Node: "a", Domain: "a", Drive: "d", UUID: "m"}}})
	want := `{"version":1,"uuid":"u","name":"n","k":4,"m":2,"groups":1,"owner":"a","state":"ready","member_size":10,` +
		`"members":[{"slot":0,"node":"a","domain":"a","drive":"d","uuid":"m"}],"created":"0001-01-01T00:00:00Z"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
