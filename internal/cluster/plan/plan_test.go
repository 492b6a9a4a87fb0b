package plan

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/placement"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

func u(n byte) [16]byte { return [16]byte{15: n, 6: 0x40, 8: 0x80} }

func us(n byte) string {
	x := u(n)
	return fmt.Sprintf("%x-%x-%x-%x-%x", x[0:4], x[4:6], x[6:8], x[8:10], x[10:])
}

func node(name string, alive bool) model.NodeStatus {
	n := model.NodeStatus{Alive: alive, Node: model.Node{Name: name, Domain: name, HostNQN: "nqn.host:" + name,
		StorageAddresses: []string{"10.0.0." + name, "10.1.0." + name}}}
	for i := 1; i <= 3; i++ {
		n.Drives = append(n.Drives, model.Drive{ID: fmt.Sprintf("%s-d%d", name, i), Size: 1 << 30})
	}
	return n
}

func members(drives ...string) []model.VolumeMember {
	var out []model.VolumeMember
	for i, d := range drives {
		n := strings.Split(d, "-")[0]
		out = append(out, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: d})
	}
	return out
}

// view: a, b, c alive, d dead. v1 (2+2, ready, owner a) has a member on
// every node including the dead d; v2 (1+2, creating, owner b) on b, c, a.
func view(self string) View {
	v1 := model.Volume{Version: 1, UUID: us(1), Name: "v1", K: 2, M: 2, Groups: 1, Owner: "a", State: model.VolumeReady,
		Members: members("a-d1", "b-d1", "c-d1", "d-d1")}
	for i := range v1.Members {
		v1.Members[i].UUID = us(byte(0x10 + i))
	}
	v2 := model.Volume{Version: 1, UUID: us(2), Name: "v2", K: 1, M: 2, Groups: 1, Owner: "b", State: model.VolumeCreating,
		Members: members("b-d2", "c-d2", "a-d2")}
	held := map[string]map[string]uint64{"a": {us(1): 7}, "b": {us(2): 8}}[self]
	return View{Self: self, Nodes: []model.NodeStatus{node("a", true), node("b", true), node("c", true), node("d", false)},
		Volumes: []model.Volume{v1, v2}, HostKeys: map[string]nvmf.SecretText{"a": "KEY-a", "b": "KEY-b", "c": "KEY-c", "d": "KEY-d"}, Held: held,
		CtrlKeys: map[string]nvmf.SecretText{"a": "KEY-ctrl-a", "b": "KEY-ctrl-b", "c": "KEY-ctrl-c"}}
}

func TestPlacementNodes(t *testing.T) {
	got := PlacementNodes(view("a"))
	want := []placement.Node{
		{Name: "a", Domain: "a", Owned: 1, Free: []placement.Drive{{ID: "a-d3", Size: 1 << 30}}},
		{Name: "b", Domain: "b", Owned: 1, Free: []placement.Drive{{ID: "b-d3", Size: 1 << 30}}},
		{Name: "c", Domain: "c", Owned: 0, Free: []placement.Drive{{ID: "c-d3", Size: 1 << 30}}},
	} // d is dead: none of its drives is free, not even d-d2 and d-d3
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PlacementNodes:\n got %+v\nwant %+v", got, want)
	}
}

func TestNewVolume(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name string
		req  placement.Request
		want string // error substring; "" = placed
	}{
		{"2+1 over the three free drives", placement.Request{Name: "v3", K: 2, M: 1}, ""},
		{"name held by a record", placement.Request{Name: "v2", K: 1, M: 1}, `volume "v2" exists (` + us(2) + ", owner b)"},
		{"more drives than free", placement.Request{Name: "v3", K: 2, M: 2}, "have 3 nodes (a: 1 free, b: 1 free, c: 1 free)"},
		{"the dead node's drives are not free", placement.Request{Name: "v3", K: 2, M: 1, Nodes: []string{"a", "d"}}, `no placement: volume "v3": node d is dead (--nodes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewVolume(view("a"), tc.req, u(3), now)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := model.Volume{Version: model.VolumeVersion, UUID: us(3), Name: "v3", K: 2, M: 1, Groups: 1, Owner: "c",
				State: model.VolumeCreating, MemberSize: 1 << 30, Created: now.UTC(), Members: members("a-d3", "b-d3", "c-d3"), FixedParity: true}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("NewVolume:\n got %+v\nwant %+v", got, want)
			}
		})
	}
	if _, err := NewVolume(view("a"), placement.Request{Name: "x", K: 4, M: 2}, u(3), now); !errors.Is(err, placement.ErrNoPlacement) {
		t.Errorf("refusal %v does not wrap ErrNoPlacement", err)
	}
}

// The owner's members go to the end of each group (the parity slots of
// the owner-parity layout), the others keep their order; a volume whose
// owner holds no member keeps the rotating layout.
func TestOwnerParityOrder(t *testing.T) {
	nodes := func(ms []model.VolumeMember) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Node+"/"+m.Drive)
		}
		return strings.Join(out, " ")
	}
	mk := func(spec ...string) []model.VolumeMember {
		var ms []model.VolumeMember
		for _, x := range spec {
			n, d, _ := strings.Cut(x, "/")
			ms = append(ms, model.VolumeMember{Node: n, Drive: d})
		}
		return ms
	}
	for _, tc := range []struct {
		name  string
		in    []model.VolumeMember
		width int
		owner string
		want  string
		fixed bool
	}{
		{"4+2, owner first", mk("a/1", "a/2", "b/1", "b/2", "c/1", "c/2"), 6, "a", "b/1 b/2 c/1 c/2 a/1 a/2", true},
		{"4+2, owner spread", mk("b/1", "a/1", "c/1", "a/2", "b/2", "c/2"), 6, "a", "b/1 c/1 b/2 c/2 a/1 a/2", true},
		{"two groups", mk("a/1", "b/1", "c/1", "c/2", "a/2", "b/2"), 3, "c", "a/1 b/1 c/1 a/2 b/2 c/2", true},
		{"owner holds nothing", mk("a/1", "b/1", "c/1"), 3, "d", "a/1 b/1 c/1", false},
	} {
		ms := slices.Clone(tc.in)
		fixed := ownerParityOrder(ms, tc.width, tc.owner)
		if got := nodes(ms); got != tc.want || fixed != tc.fixed {
			t.Errorf("%s: %s, fixed parity %v; want %s, %v", tc.name, got, fixed, tc.want, tc.fixed)
		}
	}
}

func TestExporterInput(t *testing.T) {
	drives := []exporter.Drive{{ID: "c-d1", Path: "/dev/vdb"}, {ID: "c-d2", Path: "/dev/vdc"}, {ID: "c-d3", Path: "/dev/vdd"}}
	vols := []exporter.Volume{
		{UUID: us(1), Owner: exporter.Host{NQN: "nqn.host:a", Secret: "KEY-a"}, Members: []string{"a-d1", "b-d1", "c-d1", "d-d1"}},
		{UUID: us(2), Owner: exporter.Host{NQN: "nqn.host:b", Secret: "KEY-b"}, Members: []string{"b-d2", "c-d2", "a-d2"}},
	}
	for _, tc := range []struct {
		name string
		v    View
		want exporter.Input
	}{
		{"c: members of both volumes", view("c"), exporter.Input{HostNQN: "nqn.host:c", Drives: drives, Addresses: []string{"10.0.0.c", "10.1.0.c"}, Volumes: vols, CtrlSecret: "KEY-ctrl-c"}},
		{"a owns v1: passed on, the exporter skips it", view("a"), exporter.Input{HostNQN: "nqn.host:a", Drives: drives, Addresses: []string{"10.0.0.a", "10.1.0.a"}, Volumes: vols, CtrlSecret: "KEY-ctrl-a"}},
		{"no owner: exported to nobody", func() View {
			v := view("c")
			v.Volumes = v.Volumes[1:]
			v.Volumes[0].Owner = ""
			return v
		}(), exporter.Input{HostNQN: "nqn.host:c", Drives: drives, Addresses: []string{"10.0.0.c", "10.1.0.c"}, CtrlSecret: "KEY-ctrl-c",
			Volumes: []exporter.Volume{{UUID: us(2), Members: []string{"b-d2", "c-d2", "a-d2"}}}}},
		{"d (dead, its members listed): only v1", view("d"), exporter.Input{HostNQN: "nqn.host:d", Drives: drives, Addresses: []string{"10.0.0.d", "10.1.0.d"}, Volumes: vols[:1]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExporterInput(tc.v, drives); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestPlansPrintNoSecret: the view and the inputs the planners derive
// from it carry the host and controller keys ("KEY-ctrl-*"), and print
// none of them (a log line or an
// error that prints a plan must not leak a DH-HMAC-CHAP secret).
func TestPlansPrintNoSecret(t *testing.T) {
	v := view("c")
	id := nvmf.HostIdentity{NQN: "nqn.host:c", ID: us(9)}
	va := view("a")
	for what, x := range map[string]any{"view": v, "exporter input": ExporterInput(v, nil), "importer input": ImporterInput(v, id, nil),
		"owner's importer input": ImporterInput(va, id, nil), "consumers": Consumers(v)} {
		for _, s := range []string{fmt.Sprintf("%v", x), fmt.Sprintf("%+v", x), fmt.Sprintf("%#v", x)} {
			if strings.Contains(s, "KEY-") {
				t.Errorf("%s prints a host key: %s", what, s)
			}
		}
	}
}

func TestImporterInput(t *testing.T) {
	id := nvmf.HostIdentity{NQN: "nqn.host:a", ID: us(9)}
	local := map[string]string{"a-d1": "/dev/vdb", "a-d2": "/dev/vdc", "b-d2": "/dev/vdc"}

	// a owns v1 (ready): every member by UUID, the dead d's too.
	imp := ImporterInput(view("a"), id, local)
	want := importer.Input{Identity: id, Secret: "KEY-a",
		Members: [][16]byte{u(0x10), u(0x11), u(0x12), u(0x13)},
		Remotes: []importer.Remote{{NQN: exporter.NQNPrefix + "b-d1", Address: "10.0.0.b", CtrlSecret: "KEY-ctrl-b", Node: "b"},
			{NQN: exporter.NQNPrefix + "c-d1", Address: "10.0.0.c", CtrlSecret: "KEY-ctrl-c", Node: "c"},
			{NQN: exporter.NQNPrefix + "d-d1", Address: "10.0.0.d", KeepOnly: true, Node: "d"}}, // d has no controller key: host auth only
		Local: []string{"/dev/vdb"}}
	if !reflect.DeepEqual(imp.Input, want) {
		t.Errorf("a:\n got %+v\nwant %+v", imp.Input, want)
	}
	if len(imp.Volumes) != 1 || imp.Volumes[0].UUID != u(1) || len(imp.Volumes[0].Slots) != 4 {
		t.Fatalf("a owns %+v, want v1 with 4 slots", imp.Volumes)
	}
	// The importer found a's member locally under another name and b's
	// remotely; c's under a renumbered head; d's not (dead).
	r := importer.Result{Paths: map[[16]byte]string{u(0x10): "/dev/vdz", u(0x11): "/dev/nvme1n1", u(0x12): "/dev/nvme0n1"},
		Devices: []importer.Device{{Path: "/dev/nvme0n1", Remote: exporter.NQNPrefix + "c-d1"}}}
	if got := imp.Paths(r)[u(1)]; !reflect.DeepEqual(got, []string{"/dev/vdz", "/dev/nvme1n1", "/dev/nvme0n1", ""}) {
		t.Errorf("v1 paths %q", got)
	}

	// b owns v2 (creating): no UUIDs yet; remote drives by their export
	// heads, the local one by its claim.
	imp = ImporterInput(view("b"), id, local)
	want = importer.Input{Identity: id, Secret: "KEY-b",
		Remotes: []importer.Remote{{NQN: exporter.NQNPrefix + "c-d2", Address: "10.0.0.c", CtrlSecret: "KEY-ctrl-c", Node: "c"},
			{NQN: exporter.NQNPrefix + "a-d2", Address: "10.0.0.a", CtrlSecret: "KEY-ctrl-a", Node: "a"}},
		Local: []string{"/dev/vdc"}}
	if !reflect.DeepEqual(imp.Input, want) {
		t.Errorf("b:\n got %+v\nwant %+v", imp.Input, want)
	}
	r = importer.Result{Devices: []importer.Device{
		{Path: "/dev/nvme4n1", Remote: exporter.NQNPrefix + "a-d2"}, {Path: "/dev/vdc"}, {Path: "/dev/nvme2n1", Remote: exporter.NQNPrefix + "c-d2"}}}
	if got := imp.Paths(r)[u(2)]; !reflect.DeepEqual(got, []string{"/dev/vdc", "/dev/nvme2n1", "/dev/nvme4n1"}) {
		t.Errorf("v2 paths %q", got)
	}

	// c owns nothing.
	if imp := ImporterInput(view("c"), id, nil); len(imp.Volumes) != 0 || len(imp.Input.Remotes)+len(imp.Input.Members)+len(imp.Input.Local) != 0 {
		t.Errorf("c: %+v, want nothing", imp)
	}
	// The record naming a as owner is not enough: without the owner key
	// a imports nothing.
	v := view("a")
	v.Held = nil
	if imp := ImporterInput(v, id, local); len(imp.Volumes) != 0 || len(imp.Input.Members) != 0 {
		t.Errorf("a without the owner key: %+v, want nothing", imp)
	}
}

func TestConsumers(t *testing.T) {
	v := view("c")
	v.Volumes = append(v.Volumes,
		model.Volume{UUID: us(4), Name: "v0", State: model.VolumeReady, Owner: "", Members: members("a-d3")},     // failover in progress
		model.Volume{UUID: us(5), Name: "v5", State: model.VolumeDeleting, Owner: "a", Members: members("b-d3")}, // going
		model.Volume{UUID: us(6), Name: "v6", State: model.VolumeReady, Owner: "d", Members: members("c-d3")},    // owner dead: still consumed
	)
	got := Consumers(v)
	want := []Consumer{
		{UUID: u(1), Name: "v1", NQN: "nqn.2026-11.io.fabraid:vol:" + us(1), Owner: "a", Addresses: []string{"10.0.0.a", "10.1.0.a"}},
		{UUID: u(6), Name: "v6", NQN: "nqn.2026-11.io.fabraid:vol:" + us(6), Owner: "d", Addresses: []string{"10.0.0.d", "10.1.0.d"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Consumers:\n got %+v\nwant %+v", got, want)
	}
}

// TestAttach: a volume with an attach list is consumed by its attached
// nodes only and its export admits their host NQNs only (an attached
// node the view does not know adds none); an empty list attaches it to
// no node; no list: every node, as before attach lists.
func TestAttach(t *testing.T) {
	v := view("c")
	v.Volumes = append(v.Volumes,
		model.Volume{UUID: us(6), Name: "v6", State: model.VolumeReady, Owner: "a", Members: members("c-d3"), Attach: &model.AttachList{Nodes: []string{"b", "gone"}}},
		model.Volume{UUID: us(7), Name: "v7", State: model.VolumeReady, Owner: "a", Members: members("b-d3"), Attach: &model.AttachList{Nodes: []string{}}},
	)
	names := func(cs []Consumer) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	for node, want := range map[string][]string{"a": {"v1"}, "b": {"v1", "v6"}, "c": {"v1"}} {
		if got := names(ConsumedBy(v, node)); !reflect.DeepEqual(got, want) {
			t.Errorf("ConsumedBy(%s) = %v, want %v", node, got, want)
		}
	}
	if got := names(Consumers(v)); !reflect.DeepEqual(got, []string{"v1", "v6", "v7"}) {
		t.Errorf("Consumers = %v, want every ready volume", got)
	}
	want := map[[16]byte][]string{u(6): {"nqn.host:b"}, u(7): {}}
	if got := AttachedHosts(v); !reflect.DeepEqual(got, want) {
		t.Errorf("AttachedHosts = %v, want %v", got, want)
	}
}

func TestChooseOwner(t *testing.T) {
	v := view("c")
	// v1's owner a is gone: b, c and the dead d hold members; b and c
	// own nothing else but b owns v2: c.
	v1 := v.Volumes[0]
	if got := ChooseOwner(v, v1); got != "c" {
		t.Errorf("v1: %q, want c (fewest owned among member nodes)", got)
	}
	// A node without a member of the volume is preferred.
	v.Nodes = append(v.Nodes, node("e", true))
	v.Volumes = append(v.Volumes, model.Volume{UUID: us(7), Name: "v7", Owner: "e"}, model.Volume{UUID: us(8), Name: "v8", Owner: "e"})
	if got := ChooseOwner(v, v1); got != "e" {
		t.Errorf("v1 with e (no member, owns 2): %q, want e", got)
	}
	// Every node computes the same answer, whatever it is.
	for _, self := range []string{"a", "b", "e"} {
		w := v
		w.Self = self
		if got := ChooseOwner(w, v1); got != "e" {
			t.Errorf("from %s: %q, want e", self, got)
		}
	}
	// Equal candidates: the smallest name; the dead and the record owner never.
	v = view("b")
	v.Volumes = nil
	if got := ChooseOwner(v, model.Volume{UUID: us(9), Owner: "a"}); got != "b" {
		t.Errorf("no members anywhere: %q, want b", got)
	}
	v.Nodes = []model.NodeStatus{node("a", true), node("d", false)}
	if got := ChooseOwner(v, model.Volume{UUID: us(9), Owner: "a"}); got != "" {
		t.Errorf("only the owner and a dead node: %q, want none", got)
	}
	// A drained node is never chosen (fabraid node drain).
	v.Nodes = []model.NodeStatus{node("a", true), node("b", true), node("c", true)}
	v.Nodes[1].Drained = true
	if got := ChooseOwner(v, model.Volume{UUID: us(9), Owner: "a"}); got != "c" {
		t.Errorf("b drained: %q, want c", got)
	}
	v.Nodes[2].Drained = true
	if got := ChooseOwner(v, model.Volume{UUID: us(9), Owner: "a"}); got != "" {
		t.Errorf("b and c drained: %q, want none", got)
	}
}
