package exporter

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

var (
	hostA = "nqn.2014-08.org.nvmexpress:uuid:0a0a0a0a-0000-4000-8000-00000000000a" // this node
	hostB = "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b"
	hostC = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0000-4000-8000-00000000000c"
	keyB  = nvmf.Secret{Key: bytes.Repeat([]byte{0xb}, 32)}.Reveal()
	keyC  = nvmf.Secret{Key: bytes.Repeat([]byte{0xc}, 32)}.Reveal()
	auth  = nvmet.Features{Auth: true}
)

// base: this node (A) has drives d1, d2, d3; volume v1 (owner B) has d1, d2
// and a drive of another node; d3 is in no volume.
func base() Input {
	return Input{
		HostNQN:   hostA,
		Drives:    []Drive{{ID: "d1", Path: "/dev/nvme0n1"}, {ID: "d2", Path: "/dev/nvme1n1"}, {ID: "d3", Path: "/dev/nvme2n1"}},
		Volumes:   []Volume{{UUID: "v1", Owner: Host{NQN: hostB, Secret: nvmf.SecretText(keyB)}, Members: []string{"d1", "x9", "d2"}}},
		Addresses: []string{"10.0.0.1"},
	}
}

func sub(id, host string) nvmet.Subsystem {
	return nvmet.Subsystem{NQN: NQN(id), Serial: NamespaceNGUID(id)[:20], Model: "fabraid drive", AllowedHosts: []string{host},
		Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: map[string]string{"d1": "/dev/nvme0n1", "d2": "/dev/nvme1n1", "d3": "/dev/nvme2n1"}[id],
			UUID: NamespaceUUID(id), NGUID: NamespaceNGUID(id)}}}
}

func TestDesire(t *testing.T) {
	port := func(subs ...string) nvmet.Port {
		return nvmet.Port{ID: PortBase, Transport: nvmet.TCP, Address: "10.0.0.1", ServiceID: DefaultServiceID, Subsystems: subs}
	}
	tests := []struct {
		name     string
		in       func(in *Input)
		f        nvmet.Features
		spec     nvmet.Spec
		exports  []string // drive:host:auth
		problems []string // regexps
	}{
		{name: "members exported to the owner only, with its key", f: auth,
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB, DHCHAPKey: keyB}}, Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d2", hostB)},
				Ports: []nvmet.Port{port(NQN("d1"), NQN("d2"))}},
			exports: []string{"d1:" + hostB + ":true", "d2:" + hostB + ":true"}},
		{name: "bidirectional: this node's controller key on the owner's entry", f: auth,
			in: func(in *Input) { in.CtrlSecret = nvmf.SecretText(keyC) },
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB, DHCHAPKey: keyB, DHCHAPCtrlKey: keyC}}, Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d2", hostB)},
				Ports: []nvmet.Port{port(NQN("d1"), NQN("d2"))}},
			exports: []string{"d1:" + hostB + ":true", "d2:" + hostB + ":true"}},
		{name: "controller key but an owner without secret (allowed): no controller key", f: auth,
			in: func(in *Input) {
				in.CtrlSecret = nvmf.SecretText(keyC)
				in.Volumes[0].Owner.Secret = ""
				in.AllowNoAuth = true
			},
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB}}, Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d2", hostB)},
				Ports: []nvmet.Port{port(NQN("d1"), NQN("d2"))}},
			exports: []string{"d1:" + hostB + ":false", "d2:" + hostB + ":false"}},
		{name: "controller key on a kernel without auth: none", f: nvmet.Features{},
			in: func(in *Input) { in.CtrlSecret = nvmf.SecretText(keyC); in.AllowUnauthenticated = true },
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB}}, Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d2", hostB)},
				Ports: []nvmet.Port{port(NQN("d1"), NQN("d2"))}},
			exports: []string{"d1:" + hostB + ":false", "d2:" + hostB + ":false"}},
		{name: "kernel without auth, require_auth = false: exported without key", f: nvmet.Features{},
			in: func(in *Input) { in.AllowUnauthenticated = true },
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB}}, Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d2", hostB)},
				Ports: []nvmet.Port{port(NQN("d1"), NQN("d2"))}},
			exports: []string{"d1:" + hostB + ":false", "d2:" + hostB + ":false"}},
		{name: "owner without secret refused on an auth kernel", f: auth,
			in:       func(in *Input) { in.Volumes[0].Owner.Secret = "" },
			problems: []string{`drive d1 of volume v1: owner .*0b: owner has no DH-HMAC-CHAP secret`, `drive d2 `}},
		{name: "owner without secret allowed when asked", f: auth,
			in: func(in *Input) { in.Volumes[0].Owner.Secret = ""; in.AllowNoAuth = true },
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB}}, Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d2", hostB)},
				Ports: []nvmet.Port{port(NQN("d1"), NQN("d2"))}},
			exports: []string{"d1:" + hostB + ":false", "d2:" + hostB + ":false"}},
		{name: "volume owned by this node: nothing exported", f: auth,
			in: func(in *Input) { in.Volumes[0].Owner = Host{NQN: hostA, Secret: nvmf.SecretText(keyB)} }},
		{name: "no volumes: nothing exported", f: auth, in: func(in *Input) { in.Volumes = nil }},
		{name: "no owner (failover): exported to nobody, no problem", f: auth, in: func(in *Input) { in.Volumes[0].Owner = Host{} }},
		{name: "drive in two volumes is refused, the rest exported", f: auth,
			in: func(in *Input) {
				in.Volumes = append(in.Volumes, Volume{UUID: "v2", Owner: Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}, Members: []string{"d2", "d3"}})
			},
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB, DHCHAPKey: keyB}, {NQN: hostC, DHCHAPKey: keyC}},
				Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d3", hostC)}, Ports: []nvmet.Port{port(NQN("d1"), NQN("d3"))}},
			exports:  []string{"d1:" + hostB + ":true", "d3:" + hostC + ":true"},
			problems: []string{`drive d2: member of volumes v1 and v2: conflicting input`}},
		{name: "one host with two secrets is refused", f: auth,
			in: func(in *Input) {
				in.Volumes = append(in.Volumes, Volume{UUID: "v2", Owner: Host{NQN: hostB, Secret: nvmf.SecretText(keyC)}, Members: []string{"d3"}})
			},
			problems: []string{`host .*0b: two different DH-HMAC-CHAP secrets`}},
		{name: "two addresses, two ports, own service id", f: auth,
			in: func(in *Input) { in.Addresses = []string{"10.0.0.1", "10.1.0.1"}; in.ServiceID = "4500" },
			spec: nvmet.Spec{Hosts: []nvmet.Host{{NQN: hostB, DHCHAPKey: keyB}}, Subsystems: []nvmet.Subsystem{sub("d1", hostB), sub("d2", hostB)},
				Ports: []nvmet.Port{
					{ID: PortBase, Transport: nvmet.TCP, Address: "10.0.0.1", ServiceID: "4500", Subsystems: []string{NQN("d1"), NQN("d2")}},
					{ID: PortBase + 1, Transport: nvmet.TCP, Address: "10.1.0.1", ServiceID: "4500", Subsystems: []string{NQN("d1"), NQN("d2")}}}},
			exports: []string{"d1:" + hostB + ":true", "d2:" + hostB + ":true"}},
		{name: "bad address: nothing exported", f: auth, in: func(in *Input) { in.Addresses = []string{"not-an-ip"} },
			problems: []string{`storage ports not-an-ip:4421: port 18100: address "not-an-ip"`}},
		{name: "bad owner NQN", f: nvmet.Features{}, in: func(in *Input) { in.Volumes[0].Owner.NQN = "bogus"; in.AllowUnauthenticated = true },
			problems: []string{`drive d1 of volume v1: host: .*bogus`, `drive d2 `}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			if tt.in != nil {
				tt.in(&in)
			}
			d := Desire(in, tt.f)
			if !reflect.DeepEqual(d.Spec, tt.spec) {
				t.Errorf("spec\n got %+v\nwant %+v", d.Spec, tt.spec)
			}
			var ex []string
			for _, e := range d.Exports {
				ex = append(ex, e.DriveID+":"+e.Host+":"+map[bool]string{true: "true", false: "false"}[e.Auth])
				if e.NQN != NQN(e.DriveID) || e.Volume == "" {
					t.Errorf("export %+v", e)
				}
			}
			if !reflect.DeepEqual(ex, tt.exports) {
				t.Errorf("exports %v, want %v", ex, tt.exports)
			}
			if len(d.Problems) != len(tt.problems) {
				t.Fatalf("problems %v, want %d matching %v", d.Problems, len(tt.problems), tt.problems)
			}
			for i, p := range tt.problems {
				if !regexp.MustCompile(p).MatchString(d.Problems[i].Error()) {
					t.Errorf("problem %d = %v, want match %q", i, d.Problems[i], p)
				}
			}
			for _, s := range d.Spec.Subsystems {
				if s.AllowAnyHost || len(s.AllowedHosts) != 1 {
					t.Errorf("subsystem %s allows %v (any host %v)", s.NQN, s.AllowedHosts, s.AllowAnyHost)
				}
			}
			if len(d.Spec.Subsystems) > 0 {
				if err := d.Spec.Validate(nvmet.DriveOwnership()); err != nil {
					t.Errorf("desired spec invalid: %v", err)
				}
			}
		})
	}
}

func TestDesireErrors(t *testing.T) {
	in := base()
	in.Volumes[0].Owner.Secret = ""
	d := Desire(in, auth)
	if len(d.Problems) == 0 || !errors.Is(d.Problems[0], ErrNoSecret) {
		t.Fatalf("problems %v, want ErrNoSecret", d.Problems)
	}
	for _, p := range d.Problems {
		if strings.Contains(p.Error(), keyB) {
			t.Fatalf("problem prints a secret: %v", p)
		}
	}
}

func TestNamespaceIDsStable(t *testing.T) {
	u := NamespaceUUID("S4EWNX0R123456")
	if u != NamespaceUUID("S4EWNX0R123456") || u == NamespaceUUID("S4EWNX0R123457") {
		t.Fatalf("namespace UUID not a function of the drive id: %s", u)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(u) {
		t.Fatalf("namespace UUID %s is not a version 8 RFC 9562 UUID", u)
	}
	if strings.ReplaceAll(u, "-", "") != NamespaceNGUID("S4EWNX0R123456") {
		t.Fatalf("NGUID %s differs from UUID %s", NamespaceNGUID("S4EWNX0R123456"), u)
	}
}

// TestFence: an owner change first unlinks the re-pointed drives from the
// port (which ends the old owner's controllers), then links them for the
// new owner; without the fence step nvmet.Diff would only swap
// allowed_hosts and the old owner's controllers would live on.
func TestFence(t *testing.T) {
	in := base()
	old := Desire(in, auth).Spec
	in.Volumes[0].Owner = Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}
	want := Desire(in, auth).Spec
	actual := asState(old)

	direct, err := nvmet.Diff(want, actual, nvmet.DriveOwnership())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(direct.String(), "unlink ports/") || !strings.Contains(direct.String(), "unlink subsystems/"+NQN("d1")+"/allowed_hosts/"+hostB) {
		t.Fatalf("nvmet.Diff alone unlinks from the port; the fence step would be redundant:\n%s", direct)
	}

	step, fenced := Fence(want, actual, nil)
	if !reflect.DeepEqual(fenced, []string{"d1", "d2"}) {
		t.Fatalf("fenced %v, want [d1 d2]", fenced)
	}
	p1, err := nvmet.Diff(step, actual, nvmet.DriveOwnership())
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{
		"unlink ports/18100/subsystems/" + NQN("d1"),
		"unlink ports/18100/subsystems/" + NQN("d2"),
		"unlink subsystems/" + NQN("d1") + "/allowed_hosts/" + hostB,
		"rmdir hosts/" + hostB,
		"link subsystems/" + NQN("d1") + "/allowed_hosts/" + hostC,
	} {
		if !strings.Contains(p1.String(), op+"\n") && !strings.Contains(p1.String(), op+" ") {
			t.Errorf("fence step lacks %q:\n%s", op, p1)
		}
	}
	if strings.Contains("\n"+p1.String(), "\nlink ports/") {
		t.Errorf("fence step links a port:\n%s", p1)
	}
	// After the fence step (or a crash right after it) nothing is left to
	// fence and the desired state links the drives again.
	mid := asState(step)
	if s, f := Fence(want, mid, nil); len(f) != 0 || !reflect.DeepEqual(s, want) {
		t.Fatalf("fence after the fence step: %v", f)
	}
	p2, err := nvmet.Diff(want, mid, nvmet.DriveOwnership())
	if err != nil {
		t.Fatal(err)
	}
	if got, wantP := p2.String(), "link ports/18100/subsystems/"+NQN("d1")+" -> subsystems/"+NQN("d1")+"\nlink ports/18100/subsystems/"+NQN("d2")+" -> subsystems/"+NQN("d2")+"\n"; got != wantP {
		t.Errorf("second step\n got %s\nwant %s", got, wantP)
	}
	// Converged: nothing to fence, nothing to do.
	if _, f := Fence(want, asState(want), nil); len(f) != 0 {
		t.Errorf("converged state fenced %v", f)
	}
}

func TestFenceKeyChange(t *testing.T) {
	in := base()
	old := Desire(in, auth).Spec
	in.Volumes[0].Owner.Secret = nvmf.SecretText(keyC) // rotated
	_, fenced := Fence(Desire(in, auth).Spec, asState(old), nil)
	if !reflect.DeepEqual(fenced, []string{"d1", "d2"}) {
		t.Fatalf("a rotated secret fenced %v, want [d1 d2]", fenced)
	}
	// A new controller key (this node's) changes the host entry in
	// place: the owner's controllers stay; its next (re-)authentication
	// checks the new key.
	in = base()
	in.CtrlSecret = nvmf.SecretText(keyB)
	old = Desire(in, auth).Spec
	in.CtrlSecret = nvmf.SecretText(keyC)
	d := Desire(in, auth).Spec
	if _, fenced := Fence(d, asState(old), nil); len(fenced) != 0 || d.Hosts[0].DHCHAPCtrlKey != keyC {
		t.Fatalf("a new controller key fenced %v (controller key set: %v)", fenced, d.Hosts[0].DHCHAPCtrlKey == keyC)
	}
}

// TestUnexport: a drive whose volume goes away (or moves to this node) is
// removed from nvmet.
func TestUnexport(t *testing.T) {
	in := base()
	old := Desire(in, auth).Spec
	in.Volumes[0].Members = []string{"d1"}
	p, err := nvmet.Diff(Desire(in, auth).Spec, asState(old), nvmet.DriveOwnership())
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"unlink ports/18100/subsystems/" + NQN("d2"), "rmdir subsystems/" + NQN("d2")} {
		if !strings.Contains(p.String(), op+"\n") {
			t.Errorf("plan lacks %q:\n%s", op, p)
		}
	}
	if strings.Contains(p.String(), NQN("d1")) {
		t.Errorf("plan touches d1:\n%s", p)
	}
}

// asState is the State Read returns once spec is applied: ports report
// their address family.
func asState(spec nvmet.Spec) nvmet.State {
	st := nvmet.State{Spec: spec, Features: auth}
	st.Ports = nil
	for _, p := range spec.Ports {
		p.Family = "ipv4"
		st.Ports = append(st.Ports, p)
	}
	return st
}
