package plan

import (
	"reflect"
	"testing"

	"github.com/fabraid/fabraid/internal/exporter"
)

// TestFencedExporterInput: the drives go to the owner key's holder, not the
// record's owner; no key, or a holder the registry does not know, is
// nobody.
func TestFencedExporterInput(t *testing.T) {
	v := view("c") // records: v1 owner a, v2 owner b
	drives := []exporter.Drive{{ID: "c-d1", Path: "/dev/vdb"}}
	keys := map[string]OwnerKey{us(1): {Node: "b", Epoch: 40}, us(2): {Node: "zz", Epoch: 41}}
	in := FencedExporterInput(v, drives, keys)
	want := []exporter.Volume{
		{UUID: us(1), Owner: exporter.Host{NQN: "nqn.host:b", Secret: "KEY-b"}, Epoch: 40, Members: []string{"a-d1", "b-d1", "c-d1", "d-d1"}},
		{UUID: us(2), Members: []string{"b-d2", "c-d2", "a-d2"}},
	}
	if !reflect.DeepEqual(in.Volumes, want) {
		t.Fatalf("\n got %+v\nwant %+v", in.Volumes, want)
	}
	if in := FencedExporterInput(v, drives, nil); in.Volumes[0].Owner != (exporter.Host{}) || in.Volumes[1].Owner != (exporter.Host{}) {
		t.Errorf("without owner keys: %+v; want every volume exported to nobody", in.Volumes)
	}
}
