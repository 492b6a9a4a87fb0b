package clusterplane

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// TestTLSDecisions: the plane's nvme_tls decisions per reconcile. Under
// required a target without tlshd refuses every export (the view and the
// registry say so, the log names tlshd once); with support it offers
// required ports, under on optional ones, and TLSPorts (the registry
// record) says which. Each member connection follows the exporting
// node's record: TLS to a node with TLS ports, refused with the reason
// towards a plain one under required.
func TestTLSDecisions(t *testing.T) {
	all := fabrictls.Support{Kernel: true, Keyring: true, TLSHD: true}
	noTLSHD := fabrictls.Support{Kernel: true, Keyring: true}
	for _, tc := range []struct {
		name    string
		mode    string
		support fabrictls.Support
		ports   string
		refused bool
		logs    int // lines after 3 reconciles: the export state's, and TLS's unless off or refused
	}{
		{"off", "off", all, fabrictls.PortsPlain, false, 1},
		{"on", "on", all, fabrictls.PortsOptional, false, 2},
		{"on without tlshd", "on", noTLSHD, fabrictls.PortsPlain, false, 2},
		{"required", "required", all, fabrictls.PortsRequired, false, 2},
		{"required without tlshd", "required", noTLSHD, fabrictls.PortsPlain, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged strings.Builder
			c := config.Default()
			c.Cluster.NVMeTLS = tc.mode
			d := &Plane{cfg: c, log: slog.New(slog.NewTextHandler(&logged, nil)), loop: newClusterLoop()}
			d.loop.x = &exporter.Exporter{Target: authTarget{auth: true}}
			d.loop.targetTLS = func(bool) fabrictls.Support { return tc.support }
			d.loop.hostTLS = func() fabrictls.Support { return tc.support }
			for range 3 {
				v := &clusterView{View: plan.View{Self: "a", Nodes: []model.NodeStatus{{Node: model.Node{Name: "a"}}}}}
				err := d.exportRefusal(context.Background(), v)
				if (err != nil) != tc.refused || err != nil && !errors.Is(err, fabrictls.ErrRequired) {
					t.Fatalf("refusal %v, want refused %v", err, tc.refused)
				}
				if v.Nodes[0].NVMeTLS != tc.ports || v.Nodes[0].CannotExport() != tc.refused {
					t.Fatalf("view node %+v, want ports %q, refused %v", v.Nodes[0].Node, tc.ports, tc.refused)
				}
			}
			if got := d.TLSPorts(); got != tc.ports {
				t.Errorf("registry ports %q, want %q", got, tc.ports)
			}
			if st, why := d.loop.exportsState(); tc.refused && (st != model.ExportsRefused || !strings.Contains(why, "tlshd")) {
				t.Errorf("registry state %q %q", st, why)
			}
			if n := strings.Count(logged.String(), "level="); n != tc.logs {
				t.Errorf("%d log lines after 3 reconciles:\n%s", n, logged.String())
			}
			if tc.refused && !strings.Contains(logged.String(), "level=ERROR msg=\"exports refused") {
				t.Errorf("no refusal in the log:\n%s", logged.String())
			}
			if tc.name == "on without tlshd" && !strings.Contains(logged.String(), "level=WARN") {
				t.Errorf("no warning that ports stay plain:\n%s", logged.String())
			}

			v := &clusterView{View: plan.View{Self: "a", Nodes: []model.NodeStatus{
				{Node: model.Node{Name: "b", NVMeTLS: fabrictls.PortsRequired}},
				{Node: model.Node{Name: "c", NVMeTLS: fabrictls.PortsPlain}},
				{Node: model.Node{Name: "e", NVMeTLS: fabrictls.PortsOptional}}}}}
			in := importer.Input{Remotes: []importer.Remote{{Node: "b"}, {Node: "c"}, {Node: "e"}}}
			d.importTLS(&in, v)
			b, cr, e := in.Remotes[0], in.Remotes[1], in.Remotes[2]
			switch {
			case tc.mode == "off":
				if b.TLS || b.Refused == "" || cr.TLS || cr.Refused != "" || e.TLS || e.Refused != "" {
					t.Errorf("off: %+v", in.Remotes)
				}
			case tc.support.OK():
				if !b.TLS || cr.TLS || !e.TLS || (cr.Refused != "") != (tc.mode == "required") {
					t.Errorf("%s: %+v", tc.mode, in.Remotes)
				}
			default:
				if b.TLS || b.Refused == "" || !strings.Contains(b.Refused+cr.Refused, "tlshd") {
					t.Errorf("%s without support: %+v", tc.mode, in.Remotes)
				}
			}
		})
	}
}

// TestVolumeTLS: the volume paths follow the drive paths' decisions.
// This node's volume ports offer what its record says its drive ports
// offer; each consumer connection is decided from its owner's record as
// a member connection is: TLS to an owner with TLS ports, plain to a
// plain one under on, refused with the reason under required (logged
// once over several passes, shown by volume show), and a refusal that
// ends is logged once too.
func TestVolumeTLS(t *testing.T) {
	all := fabrictls.Support{Kernel: true, Keyring: true, TLSHD: true}
	toB, toC := [16]byte{0xb}, [16]byte{0xc}
	view := func(cPorts string) *clusterView {
		node := func(name, ports string) model.NodeStatus {
			return model.NodeStatus{Node: model.Node{Name: name, NVMeTLS: ports, StorageAddresses: []string{"10.0.0." + name}}}
		}
		return &clusterView{View: plan.View{Self: "a",
			Nodes: []model.NodeStatus{node("a", fabrictls.PortsRequired), node("b", fabrictls.PortsRequired), node("c", cPorts)},
			Volumes: []model.Volume{{Name: "vb", UUID: volid.Format(toB), Owner: "b", State: model.VolumeReady},
				{Name: "vc", UUID: volid.Format(toC), Owner: "c", State: model.VolumeReady}}}}
	}
	for _, tc := range []struct {
		mode          string
		tlsB, tlsC    bool
		refusedC      bool
		selfPorts     string
		refusalLogged bool
	}{
		{"off", false, false, false, fabrictls.PortsRequired, false}, // b requires TLS: refused under off
		{"on", true, false, false, fabrictls.PortsRequired, false},
		{"required", true, false, true, fabrictls.PortsRequired, true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var logged strings.Builder
			c := config.Default()
			c.Cluster.NVMeTLS = tc.mode
			d := &Plane{cfg: c, log: slog.New(slog.NewTextHandler(&logged, nil)), loop: newClusterLoop()}
			d.loop.hostTLS = func() fabrictls.Support { return all }
			for range 3 {
				mp := volmgr.ClusterPlan{Consumers: []volmgr.Consumer{{UUID: toB}, {UUID: toC}}}
				d.volumeTLS(&mp, view(fabrictls.PortsPlain))
				b, cc := mp.Consumers[0], mp.Consumers[1]
				if mp.TLS != tc.selfPorts {
					t.Fatalf("volume ports %q, want the drive ports' %q", mp.TLS, tc.selfPorts)
				}
				if tc.mode == "off" {
					if b.TLS || !strings.Contains(b.Refused, "requires TLS") || cc.TLS || cc.Refused != "" {
						t.Fatalf("off: %+v", mp.Consumers)
					}
					continue
				}
				if b.TLS != tc.tlsB || b.Refused != "" || cc.TLS != tc.tlsC || (cc.Refused != "") != tc.refusedC {
					t.Fatalf("consumers %+v: want TLS to b %v, to c %v, c refused %v", mp.Consumers, tc.tlsB, tc.tlsC, tc.refusedC)
				}
				if got := d.loop.pathRefusedWhy(toC); got != cc.Refused {
					t.Fatalf("volume show's reason %q, want %q", got, cc.Refused)
				}
			}
			if n := strings.Count(logged.String(), "volume path refused"); n != map[bool]int{true: 1}[tc.refusalLogged] && tc.mode != "off" {
				t.Errorf("%d refusal lines after 3 passes:\n%s", n, logged.String())
			}
			mp := volmgr.ClusterPlan{Consumers: []volmgr.Consumer{{UUID: toB}, {UUID: toC}}}
			d.volumeTLS(&mp, view(fabrictls.PortsOptional)) // c's target can do TLS now
			if tc.mode != "off" && (mp.Consumers[1].Refused != "" || !mp.Consumers[1].TLS || d.loop.pathRefusedWhy(toC) != "") {
				t.Errorf("c with optional ports: %+v, reason %q", mp.Consumers[1], d.loop.pathRefusedWhy(toC))
			}
			if tc.refusalLogged && strings.Count(logged.String(), "no longer refused") != 1 {
				t.Errorf("the end of the refusal not logged once:\n%s", logged.String())
			}
		})
	}
}
