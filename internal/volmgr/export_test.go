package volmgr

import (
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

func TestExportSpec(t *testing.T) {
	u1 := [16]byte{0x7c, 0x1e, 0x6d, 0x0a, 0x2a, 0x8f, 0x4f, 0x43, 0x9a, 0x57, 0x3d, 0x1c, 0x2a, 0x9f, 0, 1}
	u0 := [16]byte{1}
	exports := ExportSpec([]Export{{UUID: u1, Device: "/dev/ublkb3"}, {UUID: u0, Device: "/dev/ublkb0"}}, "nqn.2014-08.org.nvmexpress:uuid:0f7f9c2c-6c0e-4d55-9a2a-9b2d0d0e0f01", "127.0.0.1", 4420)
	// What the kernel backend makes of it (the configfs state fabraid had
	// before the backend interface).
	spec, err := pnvmet.Spec(nvmet.VolumeOwnership(), exports, nvmet.State{})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Subsystems) != 2 || len(spec.Ports) != 1 || len(spec.Hosts) != 1 {
		t.Fatalf("%+v", spec)
	}
	s := spec.Subsystems[1]
	if s.NQN != "nqn.2026-11.io.fabraid:vol:7c1e6d0a-2a8f-4f43-9a57-3d1c2a9f0001" || s.AllowAnyHost ||
		len(s.AllowedHosts) != 1 || s.AllowedHosts[0] != "nqn.2014-08.org.nvmexpress:uuid:0f7f9c2c-6c0e-4d55-9a2a-9b2d0d0e0f01" || s.Serial != "7c1e6d0a2a8f4f439a57" ||
		s.Namespaces[0].UUID != "7c1e6d0a-2a8f-4f43-9a57-3d1c2a9f0001" || s.Namespaces[0].NGUID != "7c1e6d0a2a8f4f439a573d1c2a9f0001" ||
		s.Namespaces[0].DevicePath != "/dev/ublkb3" || s.Namespaces[0].NSID != 1 {
		t.Fatalf("subsystem %+v", s)
	}
	p := spec.Ports[0]
	if p.ID != ExportPortID || p.Transport != nvmet.TCP || p.Address != "127.0.0.1" || p.ServiceID != "4420" || len(p.Subsystems) != 2 || p.Subsystems[0] > p.Subsystems[1] {
		t.Fatalf("port %+v", p)
	}
	// The spec is valid for the kernel package's own planner.
	if _, err := nvmet.Diff(spec, nvmet.State{}, nvmet.VolumeOwnership()); err != nil {
		t.Fatalf("Diff: %v", err)
	}
	if got := ExportSpec(nil, "nqn.2014-08.org.nvmexpress:uuid:0f7f9c2c-6c0e-4d55-9a2a-9b2d0d0e0f01", "127.0.0.1", 4420); len(got) != 0 {
		t.Fatalf("empty: %+v", got)
	}
	cs, err := Connections([]Export{{UUID: u1}}, nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:0f7f9c2c-6c0e-4d55-9a2a-9b2d0d0e0f01", ID: "0f7f9c2c-6c0e-4d55-9a2a-9b2d0d0e0f01"}, "127.0.0.1", 4420)
	if err != nil || len(cs) != 1 || cs[0].Timeouts == nil || cs[0].Timeouts.CtrlLoss != nvmf.Forever {
		t.Fatalf("connections %+v %v", cs, err)
	}
	if err := cs[0].Validate(); err != nil {
		t.Fatalf("connection options invalid: %v", err)
	}
}

func TestPickDrives(t *testing.T) {
	free := []drive.Drive{{Path: "/dev/vda", ID: "A", Name: "vda"}, {Path: "/dev/vdb", ID: "B", Name: "vdb"}, {Path: "/dev/vdc", ID: "C", Name: "vdc"}}
	if got, err := pickDrives(free, nil, 2); err != nil || len(got) != 2 || got[1] != "/dev/vdb" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := pickDrives(free, nil, 4); err == nil {
		t.Fatal("picked 4 of 3")
	}
	if got, err := pickDrives(free, []string{"C", "vda"}, 2); err != nil || got[0] != "/dev/vdc" || got[1] != "/dev/vda" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := pickDrives(free, []string{"C", "/dev/vdc"}, 2); err == nil {
		t.Fatal("picked one drive twice")
	}
	if _, err := pickDrives(free, []string{"/dev/vdz"}, 1); err == nil {
		t.Fatal("picked an unclaimed drive")
	}
}

func TestState(t *testing.T) {
	for _, tc := range []struct {
		s    engine.Status
		want string
	}{
		{engine.Status{}, "optimal"},
		{engine.Status{Degraded: true}, "degraded"},
		{engine.Status{Degraded: true, Progress: &engine.Progress{Kind: "rebuild"}}, "rebuilding"},
		{engine.Status{Progress: &engine.Progress{Kind: "scrub"}}, "optimal"},
		{engine.Status{Failed: true, Degraded: true}, "failed"},
	} {
		if got := State(tc.s); got != tc.want {
			t.Errorf("State(%+v) = %s, want %s", tc.s, got, tc.want)
		}
	}
}
