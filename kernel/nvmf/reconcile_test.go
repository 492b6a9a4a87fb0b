package nvmf

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestPlanConnections(t *testing.T) {
	const own = "nqn.2026-11.io.fabraid:"
	m, _ := Profile(ProfileMember)
	v, _ := Profile(ProfileVolumePath)
	want := func(nqn, addr string, tm Timeouts) Options {
		o := baseOptions()
		o.NQN, o.Address, o.Timeouts = nqn, addr, &tm
		return o
	}
	ctrl := func(name, nqn, addr, state string, tm Timeouts) Controller {
		return Controller{Name: name, Transport: "tcp", Address: Address{TrAddr: addr, TrSvcID: "4420"}, SubsystemNQN: nqn,
			State: state, Type: "io", HostNQN: testHostNQN, Timeouts: tm}
	}
	d1 := own + "drive:d1"
	d2 := own + "drive:d2"
	vol := own + "vol:v"
	foreign := "nqn.2014-08.com.example:x"
	tests := []struct {
		name    string
		desired []Options
		actual  []Controller
		want    ConnectionPlan
	}{
		{"nothing", nil, nil, ConnectionPlan{}},
		{"connect missing", []Options{want(d1, "10.0.0.1", m)}, nil, ConnectionPlan{Connect: []Options{want(d1, "10.0.0.1", m)}}},
		{"converged", []Options{want(d1, "10.0.0.1", m)}, []Controller{ctrl("nvme0", d1, "10.0.0.1", "live", m)}, ConnectionPlan{}},
		{"reconnecting counts as present", []Options{want(d1, "10.0.0.1", m)}, []Controller{ctrl("nvme0", d1, "10.0.0.1", "connecting", m)}, ConnectionPlan{}},
		{"deleting does not", []Options{want(d1, "10.0.0.1", m)}, []Controller{ctrl("nvme0", d1, "10.0.0.1", "deleting (no IO)", m)},
			ConnectionPlan{Connect: []Options{want(d1, "10.0.0.1", m)}}},
		{"new address is a new path", []Options{want(vol, "10.0.0.2", v)}, []Controller{ctrl("nvme3", vol, "10.0.0.1", "connecting", v)},
			ConnectionPlan{Connect: []Options{want(vol, "10.0.0.2", v)}, Disconnect: []string{"nvme3"}}},
		{"retime", []Options{want(d1, "10.0.0.1", m)}, []Controller{ctrl("nvme0", d1, "10.0.0.1", "live", v)},
			ConnectionPlan{Retime: []Retime{{Name: "nvme0", Timeouts: m}}}},
		{"rounded ctrl_loss is converged", []Options{want(d1, "10.0.0.1", Timeouts{KeepAlive: 2, ReconnectDelay: 2, CtrlLoss: 5, FastIOFail: 0})},
			[]Controller{ctrl("nvme0", d1, "10.0.0.1", "live", Timeouts{KeepAlive: 2, ReconnectDelay: 2, CtrlLoss: 6, FastIOFail: 0})}, ConnectionPlan{}},
		{"foreign and discovery left alone", nil, []Controller{
			ctrl("nvme0", foreign, "10.0.0.1", "live", m),
			{Name: "nvme1", Type: "discovery", SubsystemNQN: DiscoveryNQN},
			ctrl("nvme2", d2, "10.0.0.1", "live", m),
		}, ConnectionPlan{Disconnect: []string{"nvme2"}}},
		{"duplicate controller", []Options{want(d1, "10.0.0.1", m)}, []Controller{ctrl("nvme0", d1, "10.0.0.1", "live", m), ctrl("nvme4", d1, "10.0.0.1", "live", m)},
			ConnectionPlan{Disconnect: []string{"nvme4"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanConnections(tt.desired, tt.actual, own)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("plan\n got %+v\nwant %+v", got, tt.want)
			}
			if got.Empty() != (len(tt.want.Connect)+len(tt.want.Retime)+len(tt.want.Rekey)+len(tt.want.Disconnect) == 0) {
				t.Fatal("Empty wrong")
			}
		})
	}
}

// TestPlanRekey: a live controller whose host or controller secret
// differs from the desired one is re-keyed, the controller secret first
// and one secret per plan; a controller connected without a secret of
// that kind is left alone (the kernel cannot add one); the plan prints no
// secret.
func TestPlanRekey(t *testing.T) {
	const own = "nqn.2026-11.io.fabraid:"
	k := func(b byte) string { return Secret{Key: []byte(string(make([]byte, 31)) + string(rune(b)))}.Reveal() }
	h1, h2, c1, c2 := k('a'), k('b'), k('c'), k('d')
	m, _ := Profile(ProfileMember)
	o := baseOptions()
	o.NQN, o.Address, o.Timeouts = own+"drive:d1", "10.0.0.1", &m
	want := func(host, ctrl string) Options { x := o; x.DHCHAPSecret, x.DHCHAPCtrlSecret = host, ctrl; return x }
	have := func(host, ctrl string) Controller {
		return Controller{Name: "nvme0", Transport: "tcp", Address: Address{TrAddr: "10.0.0.1", TrSvcID: o.ServiceID}, SubsystemNQN: o.NQN,
			State: "live", Type: "io", HostNQN: o.HostNQN, Timeouts: m, DHCHAPSecret: SecretText(host), DHCHAPCtrlSecret: SecretText(ctrl)}
	}
	for _, tt := range []struct {
		name string
		o    Options
		c    Controller
		want []Rekey
	}{
		{"same keys", want(h1, c1), have(h1, c1), nil},
		{"new controller key", want(h1, c2), have(h1, c1), []Rekey{{"nvme0", AttrDHCHAPCtrlSecret, SecretText(c2)}}},
		{"new host key", want(h2, c1), have(h1, c1), []Rekey{{"nvme0", AttrDHCHAPSecret, SecretText(h2)}}},
		{"both: the controller's first", want(h2, c2), have(h1, c1), []Rekey{{"nvme0", AttrDHCHAPCtrlSecret, SecretText(c2)}}},
		{"connected without a controller key: left", want(h1, c2), have(h1, ""), nil},
		{"connected without any key: left", want(h2, c2), have("", ""), nil},
		{"no key wanted: left", want("", ""), have(h1, c1), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanConnections([]Options{tt.o}, []Controller{tt.c}, own)
			if !reflect.DeepEqual(p.Rekey, tt.want) || len(p.Connect)+len(p.Disconnect)+len(p.Retime) != 0 {
				t.Fatalf("plan %+v, want rekey %+v", p, tt.want)
			}
			if out := fmt.Sprintf("%v %+v %#v", p, p, tt.c); strings.Contains(out, h2[10:40]) || strings.Contains(out, c1[10:40]) {
				t.Fatalf("the plan or controller prints a secret: %s", out)
			}
		})
	}
}
