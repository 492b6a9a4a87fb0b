package nvmet

import (
	"errors"
	"fmt"
	"testing"

	knvmet "github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/plugins/backend"
)

const vol = "nqn.2026-11.io.fabraid:vol:"

func exp(name, svc string, key backend.Secret) backend.Export {
	return backend.Export{NQN: vol + name,
		Namespaces: []backend.Namespace{{NSID: 1, Device: "/dev/vd" + name}},
		Listeners:  []backend.Listener{{Transport: "tcp", Address: "127.0.0.1", ServiceID: svc, ANAStates: map[uint32]string{1: "optimized"}}},
		Hosts:      []backend.Host{{NQN: "nqn.2014-08.org.nvmexpress:uuid:2b7a6f4e-3c1d-4e8a-9f55-0123456789ab", DHCHAPKey: key}}}
}

// TestSpecPorts: listeners sharing an address share a port; a port that
// already has the address keeps its id; new ones take the lowest free id.
func TestSpecPorts(t *testing.T) {
	own := knvmet.VolumeOwnership()
	actual := knvmet.State{Spec: knvmet.Spec{Ports: []knvmet.Port{{ID: 18007, Transport: knvmet.TCP, Address: "127.0.0.1", ServiceID: "4421"}}}}
	spec, err := Spec(own, []backend.Export{exp("a", "4420", ""), exp("b", "4420", ""), exp("c", "4421", "")}, actual)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Ports) != 2 || spec.Ports[0].ID != 18000 || len(spec.Ports[0].Subsystems) != 2 || spec.Ports[1].ID != 18007 {
		t.Fatalf("ports %+v", spec.Ports)
	}
	if len(spec.Hosts) != 1 || spec.Ports[0].ANAStates[1] != knvmet.Optimized {
		t.Fatalf("hosts %+v ana %v", spec.Hosts, spec.Ports[0].ANAStates)
	}
	back := Exports(own, knvmet.State{Spec: spec})
	if len(back) != 3 || back[2].Listeners[0].PortID != 18007 {
		t.Fatalf("exports back %+v", back)
	}
}

func TestSpecRefusals(t *testing.T) {
	own := knvmet.VolumeOwnership()
	k1 := backend.Secret("DHHC-1:00:MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=:")
	k2 := backend.Secret("DHHC-1:00:MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI=:")
	if _, err := Spec(own, []backend.Export{exp("a", "4420", k1), exp("b", "4420", k2)}, knvmet.State{}); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("two keys for one host: %v", err)
	}
	a, b := exp("a", "4420", ""), exp("b", "4420", "")
	b.Listeners[0].ANAStates[1] = "inaccessible"
	if _, err := Spec(own, []backend.Export{a, b}, knvmet.State{}); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("two ANA states on one port: %v", err)
	}
	if _, err := Spec(own, []backend.Export{{NQN: "nqn.2026-11.io.fabraid:drive:x"}}, knvmet.State{}); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("outside scope: %v", err)
	}
	if _, err := ownership("nqn.2016-06.io.spdk:"); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("foreign scope: %v", err)
	}
}

// TestFromSpecRoundTrip: a kernel/nvmet Spec with port ids survives
// FromSpec → Spec (what the drive exporter sends through the backend) and
// FromSpec → StateOf (what it reasons on after List), keys included.
func TestFromSpecRoundTrip(t *testing.T) {
	own := knvmet.DriveOwnership()
	const d, h1, h2 = "nqn.2026-11.io.fabraid:drive:", "nqn.2014-08.org.nvmexpress:uuid:2b7a6f4e-3c1d-4e8a-9f55-0123456789ab", "nqn.2014-08.org.nvmexpress:uuid:2b7a6f4e-3c1d-4e8a-9f55-0123456789ac"
	spec := knvmet.Spec{
		Hosts: []knvmet.Host{{NQN: h1, DHCHAPKey: "DHHC-1:00:a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5:"}, {NQN: h2}},
		Subsystems: []knvmet.Subsystem{
			{NQN: d + "a", Serial: "s1", Model: "fabraid drive", AllowedHosts: []string{h1}, Namespaces: []knvmet.Namespace{{NSID: 1, DevicePath: "/dev/vda", UUID: "3b1f0e5c-8a5d-4c1e-9a0b-1c2d3e4f5a6b", NGUID: "3b1f0e5c8a5d4c1e9a0b1c2d3e4f5a6b", ANAGroup: 1}}},
			{NQN: d + "b", Serial: "s2", Model: "fabraid drive", AllowedHosts: []string{h2}, Namespaces: []knvmet.Namespace{{NSID: 1, DevicePath: "/dev/vdb", ANAGroup: 1}}},
		},
		Ports: []knvmet.Port{
			{ID: 18100, Transport: knvmet.TCP, Address: "10.0.0.1", ServiceID: "4421", Subsystems: []string{d + "a", d + "b"}, ANAStates: map[uint32]knvmet.ANAState{}},
			{ID: 18101, Transport: knvmet.TCP, Address: "10.0.1.1", ServiceID: "4421", Subsystems: []string{d + "a"}, ANAStates: map[uint32]knvmet.ANAState{}},
		},
	}
	ex := FromSpec(spec)
	back, err := Spec(own, ex, knvmet.State{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%#v", back) != fmt.Sprintf("%#v", spec) {
		t.Fatalf("FromSpec → Spec:\n got %#v\nwant %#v", back, spec)
	}
	st := StateOf(ex)
	if fmt.Sprintf("%#v", st.Spec) != fmt.Sprintf("%#v", spec) {
		t.Fatalf("FromSpec → StateOf:\n got %#v\nwant %#v", st.Spec, spec)
	}
}

// An unlinked listener keeps its port (and ANA states) without the
// export on it; the export lists no listener back.
func TestSpecUnlinkedListener(t *testing.T) {
	own := knvmet.VolumeOwnership()
	a := exp("a", "4420", "")
	a.Listeners[0].Unlinked = true
	spec, err := Spec(own, []backend.Export{a}, knvmet.State{})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Ports) != 1 || len(spec.Ports[0].Subsystems) != 0 || spec.Ports[0].ANAStates[1] != knvmet.Optimized || len(spec.Subsystems) != 1 {
		t.Fatalf("ports %+v subsystems %+v: want the port kept with its ANA state, no subsystem on it, the subsystem kept", spec.Ports, spec.Subsystems)
	}
	if back := Exports(own, knvmet.State{Spec: spec}); len(back) != 1 || len(back[0].Listeners) != 0 {
		t.Fatalf("exports back %+v: want a without listeners", back)
	}
}
