package plan

import (
	"reflect"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestWithHandovers: c's drive exports of v1 while v1 moves from a to b.
// b is allowed as well while a holds the key; once b holds it at a newer
// epoch, a is named released only if its move record says so and the
// move did not fail.
func TestWithHandovers(t *testing.T) {
	moving := func() View {
		v := view("c")
		v.Volumes[0].Owner = "b" // the move's transaction
		return v
	}
	req := model.Move{Volume: us(1), From: "a", To: "b", Epoch: 7, Phase: model.MoveRequested}
	hostB := exporter.Host{NQN: "nqn.host:b", Secret: "KEY-b"}
	for _, c := range []struct {
		name     string
		view     func() View
		key      OwnerKey
		move     model.Move
		prepared exporter.Host
		released string
	}{
		{"requested, a holds the key: b prepared", moving, OwnerKey{"a", 7}, req, hostB, ""},
		{"resigned, a still the last holder seen: b prepared", moving, OwnerKey{"a", 7},
			func() model.Move { m := req; m.Phase, m.Released = model.MoveResigned, true; return m }(), hostB, ""},
		{"b holds the key, a released: a released", moving, OwnerKey{"b", 9},
			func() model.Move { m := req; m.Phase, m.Released = model.MoveResigned, true; return m }(), exporter.Host{}, "nqn.host:a"},
		{"b holds the key, done: a released", moving, OwnerKey{"b", 9},
			func() model.Move { m := req; m.Phase, m.Released = model.MoveDone, true; return m }(), exporter.Host{}, "nqn.host:a"},
		{"b holds the key, a did not release", moving, OwnerKey{"b", 9},
			func() model.Move { m := req; m.Phase = model.MoveResigned; return m }(), exporter.Host{}, ""},
		{"failed move: nothing", moving, OwnerKey{"b", 9},
			func() model.Move { m := req; m.Phase, m.Released = model.MoveFailed, true; return m }(), exporter.Host{}, ""},
		{"a holds the key again at a newer epoch: not released (b prepared again)", moving, OwnerKey{"a", 12},
			func() model.Move { m := req; m.Phase, m.Released = model.MoveResigned, true; return m }(), hostB, ""},
		{"the record names another node now: b not prepared", func() View { v := moving(); v.Volumes[0].Owner = "c"; return v },
			OwnerKey{"a", 7}, req, exporter.Host{}, ""},
		{"b dead: not prepared", func() View { v := moving(); v.Nodes[1].Alive = false; return v }, OwnerKey{"a", 7}, req, exporter.Host{}, ""},
		{"volume not ready: not prepared", func() View { v := moving(); v.Volumes[0].State = model.VolumeDeleting; return v },
			OwnerKey{"a", 7}, req, exporter.Host{}, ""},
	} {
		v := c.view()
		keys := map[string]OwnerKey{us(1): c.key}
		in := WithHandovers(FencedExporterInput(v, []exporter.Drive{{ID: "c-d1", Path: "/dev/x"}}, keys), v, keys, map[string]model.Move{us(1): c.move})
		i := slices.IndexFunc(in.Volumes, func(ev exporter.Volume) bool { return ev.UUID == us(1) })
		if i < 0 {
			t.Fatalf("%s: v1 not in the exporter input", c.name)
		}
		if ev := in.Volumes[i]; ev.Prepared != c.prepared || ev.Released != c.released {
			t.Errorf("%s: prepared %q released %q, want %q and %q", c.name, ev.Prepared.NQN, ev.Released, c.prepared.NQN, c.released)
		}
	}
}

// TestImporterInputPreparing: b, v1's move target, imports v1's members
// on live nodes (d's is keep-only: d is dead) and reads their superblocks
// but assembles only what it holds (v2); v1 is prepared once every member
// on a live node is found.
func TestImporterInputPreparing(t *testing.T) {
	v := view("b")
	id := nvmf.HostIdentity{NQN: "nqn.host:b", ID: "id-b"}
	local := map[string]string{"b-d1": "/dev/vdb", "b-d2": "/dev/vdc"}
	imp, prep := ImporterInputPreparing(v, id, local, []string{us(1)})
	if len(imp.Volumes) != 1 || imp.Volumes[0].Volume.UUID != us(2) {
		t.Fatalf("assembled %v, want v2 only", imp.Volumes)
	}
	if len(prep) != 1 || prep[0].Volume.UUID != us(1) {
		t.Fatalf("prepared %v, want v1", prep)
	}
	var remotes []string
	for _, r := range imp.Input.Remotes {
		remotes = append(remotes, r.NQN)
		if r.KeepOnly != (r.NQN == exporter.NQN("d-d1")) {
			t.Errorf("remote %s keep-only %v", r.NQN, r.KeepOnly)
		}
	}
	for _, d := range []string{"a-d1", "c-d1", "d-d1"} {
		if !slices.Contains(remotes, exporter.NQN(d)) {
			t.Errorf("remotes %v lack %s", remotes, d)
		}
	}
	if plain := ImporterInput(v, id, local); !reflect.DeepEqual(plain.Volumes, imp.Volumes) {
		t.Errorf("the assembled volumes differ from ImporterInput's")
	}
	found := map[[16]byte]string{u(0x10): "/dev/nvme1n1", u(0x11): "/dev/vdb", u(0x12): "/dev/nvme2n1"}
	if got := PreparedVolumes(v, prep, importer.Result{Paths: found}); !reflect.DeepEqual(got, []string{us(1)}) {
		t.Errorf("prepared %v with every live member found, want v1", got)
	}
	delete(found, u(0x12))
	if got := PreparedVolumes(v, prep, importer.Result{Paths: found}); len(got) != 0 {
		t.Errorf("prepared %v without c's member", got)
	}
	if imp, prep := ImporterInputPreparing(v, id, local, nil); len(prep) != 0 || !reflect.DeepEqual(imp, ImporterInput(v, id, local)) {
		t.Errorf("nothing to prepare: differs from ImporterInput")
	}
}
