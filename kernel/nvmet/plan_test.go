package nvmet

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const (
	nqnA  = "nqn.2026-11.io.fabraid:vol:a"
	nqnB  = "nqn.2026-11.io.fabraid:vol:b"
	hostX = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	hostY = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-000000000000"
	uuid1 = "0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9a9"
)

// base is a typical export: one volume on one tcp port for one host.
func base() Spec {
	return Spec{
		Hosts: []Host{{NQN: hostX}},
		Subsystems: []Subsystem{{
			NQN: nqnA, Serial: "fab0001", Model: "fabraid", Firmware: "0.1",
			AllowedHosts: []string{hostX},
			Namespaces:   []Namespace{{NSID: 1, DevicePath: "/dev/vda", UUID: uuid1}},
		}},
		Ports: []Port{{ID: 18001, Transport: TCP, Address: "169.254.77.1", ServiceID: "4420", Subsystems: []string{nqnA}}},
	}
}

// converged returns the State configfs shows once base() is applied.
func converged(s Spec) State {
	st := State{Spec: s, Features: Features{Firmware: true, Auth: true, TLS: true}}
	st.Spec = sortSpec(s)
	for i := range st.Ports {
		p := &st.Ports[i]
		p.Family = p.family()
		states := map[uint32]ANAState{1: Optimized}
		for g, v := range p.ANAStates {
			states[g] = v
		}
		p.ANAStates = states
	}
	for i := range st.Subsystems {
		for j := range st.Subsystems[i].Namespaces {
			ns := &st.Subsystems[i].Namespaces[j]
			ns.ANAGroup = max(ns.ANAGroup, 1)
			if ns.NGUID == "" {
				ns.NGUID = "00000000-0000-0000-0000-000000000000"
			}
		}
	}
	return st
}

func TestDiff(t *testing.T) {
	foreign := Subsystem{NQN: "nqn.2014-08.com.example:other", AllowedHosts: []string{hostY}}
	tests := []struct {
		name    string
		desired func() Spec
		actual  func() State
		want    string
	}{
		{
			name:    "create from empty",
			desired: base,
			actual:  func() State { return State{} },
			want: `
mkdir hosts/` + hostX + `
mkdir subsystems/` + nqnA + `
write subsystems/` + nqnA + `/attr_serial = "fab0001"
write subsystems/` + nqnA + `/attr_model = "fabraid"
write subsystems/` + nqnA + `/attr_firmware = "0.1"
link subsystems/` + nqnA + `/allowed_hosts/` + hostX + ` -> hosts/` + hostX + `
mkdir subsystems/` + nqnA + `/namespaces/1
write subsystems/` + nqnA + `/namespaces/1/device_path = "/dev/vda"
write subsystems/` + nqnA + `/namespaces/1/device_uuid = "` + uuid1 + `"
write subsystems/` + nqnA + `/namespaces/1/enable = "1"
mkdir ports/18001
write ports/18001/addr_trtype = "tcp"
write ports/18001/addr_adrfam = "ipv4"
write ports/18001/addr_traddr = "169.254.77.1"
write ports/18001/addr_trsvcid = "4420"
link ports/18001/subsystems/` + nqnA + ` -> subsystems/` + nqnA,
		},
		{
			name: "tls port required, then optional",
			desired: func() Spec {
				s := base()
				s.Ports[0].TLS, s.Ports[0].TLSOptional = true, true
				return s
			},
			actual: func() State {
				st := converged(base())
				st.Ports[0].TLS = true
				return st
			},
			want: `
unlink ports/18001/subsystems/` + nqnA + `
write ports/18001/addr_trtype = "tcp"
write ports/18001/addr_adrfam = "ipv4"
write ports/18001/addr_traddr = "169.254.77.1"
write ports/18001/addr_trsvcid = "4420"
write ports/18001/addr_tsas = "tls1.3"
write ports/18001/addr_treq = "not required"
link ports/18001/subsystems/` + nqnA + ` -> subsystems/` + nqnA,
		},
		{
			name: "tls port converged",
			desired: func() Spec {
				s := base()
				s.Ports[0].TLS = true
				return s
			},
			actual: func() State {
				s := base()
				s.Ports[0].TLS = true
				return converged(s)
			},
			want: ``,
		},
		{
			name:    "converged is a no-op",
			desired: base,
			actual:  func() State { return converged(base()) },
			want:    ``,
		},
		{
			name: "uuid case and dashes do not matter",
			desired: func() Spec {
				s := base()
				s.Subsystems[0].Namespaces[0].UUID = strings.ToUpper(strings.ReplaceAll(uuid1, "-", ""))
				return s
			},
			actual: func() State { return converged(base()) },
			want:   ``,
		},
		{
			name:    "teardown removes only what is owned",
			desired: func() Spec { return Spec{} },
			actual: func() State {
				st := converged(base())
				st.Hosts = append(st.Hosts, Host{NQN: hostY})
				st.Subsystems = append(st.Subsystems, foreign)
				st.Ports = append(st.Ports, Port{ID: 1, Transport: TCP, Subsystems: []string{foreign.NQN, nqnA}})
				st.Ports[0].ANAStates[2] = NonOptimized
				return st
			},
			want: `
unlink ports/1/subsystems/` + nqnA + `
unlink ports/18001/subsystems/` + nqnA + `
rmdir ports/18001/ana_groups/2
rmdir ports/18001
write subsystems/` + nqnA + `/namespaces/1/enable = "0"
rmdir subsystems/` + nqnA + `/namespaces/1
unlink subsystems/` + nqnA + `/allowed_hosts/` + hostX + `
rmdir subsystems/` + nqnA + `
rmdir hosts/` + hostX,
		},
		{
			name: "change device path: disable, set, enable",
			desired: func() Spec {
				s := base()
				s.Subsystems[0].Namespaces[0].DevicePath = "/dev/vdb"
				return s
			},
			actual: func() State { return converged(base()) },
			want: `
write subsystems/` + nqnA + `/namespaces/1/enable = "0"
write subsystems/` + nqnA + `/namespaces/1/device_path = "/dev/vdb"
write subsystems/` + nqnA + `/namespaces/1/enable = "1"`,
		},
		{
			name: "add namespace, host and ANA group; change ANA state of group 1",
			desired: func() Spec {
				s := base()
				s.Hosts = append(s.Hosts, Host{NQN: hostY})
				s.Subsystems[0].AllowedHosts = append(s.Subsystems[0].AllowedHosts, hostY)
				s.Subsystems[0].Namespaces = append(s.Subsystems[0].Namespaces, Namespace{NSID: 2, DevicePath: "/dev/vdb", ANAGroup: 2})
				s.Ports[0].ANAStates = map[uint32]ANAState{1: NonOptimized, 2: Optimized}
				return s
			},
			actual: func() State { return converged(base()) },
			want: `
mkdir hosts/` + hostY + `
link subsystems/` + nqnA + `/allowed_hosts/` + hostY + ` -> hosts/` + hostY + `
mkdir subsystems/` + nqnA + `/namespaces/2
write subsystems/` + nqnA + `/namespaces/2/device_path = "/dev/vdb"
write subsystems/` + nqnA + `/namespaces/2/ana_grpid = "2"
write subsystems/` + nqnA + `/namespaces/2/enable = "1"
write ports/18001/ana_groups/1/ana_state = "non-optimized"
mkdir ports/18001/ana_groups/2
write ports/18001/ana_groups/2/ana_state = "optimized"`,
		},
		{
			name: "port address change: unlink, rewrite, relink",
			desired: func() Spec {
				s := base()
				s.Ports[0].Address = "169.254.77.9"
				return s
			},
			actual: func() State { return converged(base()) },
			want: `
unlink ports/18001/subsystems/` + nqnA + `
write ports/18001/addr_trtype = "tcp"
write ports/18001/addr_adrfam = "ipv4"
write ports/18001/addr_traddr = "169.254.77.9"
write ports/18001/addr_trsvcid = "4420"
link ports/18001/subsystems/` + nqnA + ` -> subsystems/` + nqnA,
		},
		{
			name: "revoke a host: unlink and remove it",
			desired: func() Spec {
				s := base()
				s.Hosts = nil
				s.Subsystems[0].AllowedHosts = nil
				return s
			},
			actual: func() State { return converged(base()) },
			want: `
unlink subsystems/` + nqnA + `/allowed_hosts/` + hostX + `
rmdir hosts/` + hostX,
		},
		{
			name: "host also used by a foreign subsystem is kept",
			desired: func() Spec {
				s := base()
				s.Hosts = nil
				s.Subsystems[0].AllowedHosts = nil
				return s
			},
			actual: func() State {
				st := converged(base())
				st.Subsystems = append(st.Subsystems, Subsystem{NQN: "nqn.2014-08.com.example:other", AllowedHosts: []string{hostX}})
				return st
			},
			want: `
unlink subsystems/` + nqnA + `/allowed_hosts/` + hostX,
		},
		{
			name:    "allow_any_host found on: switched off",
			desired: base,
			actual: func() State {
				st := converged(base())
				st.Subsystems[0].AllowAnyHost = true
				return st
			},
			want: `
write subsystems/` + nqnA + `/attr_allow_any_host = "0"`,
		},
		{
			name:    "half-applied namespace is finished",
			desired: base,
			actual: func() State {
				st := converged(base())
				st.Subsystems[0].Namespaces[0] = Namespace{NSID: 1, UUID: "aaaaaaaa-0000-4000-8000-000000000000", Disabled: true, ANAGroup: 1}
				st.Ports[0].Subsystems = nil
				return st
			},
			want: `
write subsystems/` + nqnA + `/namespaces/1/device_path = "/dev/vda"
write subsystems/` + nqnA + `/namespaces/1/device_uuid = "` + uuid1 + `"
write subsystems/` + nqnA + `/namespaces/1/enable = "1"
link ports/18001/subsystems/` + nqnA + ` -> subsystems/` + nqnA,
		},
		{
			name: "dhchap key set and rotated, secrets redacted",
			desired: func() Spec {
				s := base()
				s.Hosts[0].DHCHAPKey = "DHHC-1:00:bmV3a2V5bmV3a2V5bmV3a2V5bmV3a2V5bmV3a2V5MTIzNA==:"
				return s
			},
			actual: func() State {
				st := converged(base())
				st.Hosts[0].DHCHAPKey = "DHHC-1:00:b2xka2V5b2xka2V5b2xka2V5b2xka2V5b2xka2V5MTIzNA==:"
				return st
			},
			want: `
write hosts/` + hostX + `/dhchap_key = <secret>`,
		},
		{
			name:    "clearing a key recreates the host",
			desired: base,
			actual: func() State {
				st := converged(base())
				st.Hosts[0].DHCHAPKey = "DHHC-1:00:b2xka2V5b2xka2V5b2xka2V5b2xka2V5b2xka2V5MTIzNA==:"
				return st
			},
			want: `
unlink subsystems/` + nqnA + `/allowed_hosts/` + hostX + `
rmdir hosts/` + hostX + `
mkdir hosts/` + hostX + `
link subsystems/` + nqnA + `/allowed_hosts/` + hostX + ` -> hosts/` + hostX,
		},
		{
			name:    "firmware not on this kernel: not retried",
			desired: base,
			actual: func() State {
				st := converged(base())
				st.Subsystems[0].Firmware = ""
				st.Features.Firmware = false
				return st
			},
			want: ``,
		},
		{
			name: "remove a subsystem, keep the port",
			desired: func() Spec {
				s := base()
				s.Subsystems = append(s.Subsystems, Subsystem{NQN: nqnB, AllowedHosts: []string{hostX}})
				return s
			},
			actual: func() State {
				s := base()
				st := converged(s)
				st.Subsystems = append(st.Subsystems, Subsystem{NQN: "nqn.2026-11.io.fabraid:vol:c", AllowedHosts: []string{hostX}})
				st.Ports[0].Subsystems = append(st.Ports[0].Subsystems, "nqn.2026-11.io.fabraid:vol:c")
				return st
			},
			want: `
unlink ports/18001/subsystems/nqn.2026-11.io.fabraid:vol:c
unlink subsystems/nqn.2026-11.io.fabraid:vol:c/allowed_hosts/` + hostX + `
rmdir subsystems/nqn.2026-11.io.fabraid:vol:c
mkdir subsystems/` + nqnB + `
link subsystems/` + nqnB + `/allowed_hosts/` + hostX + ` -> hosts/` + hostX,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Diff(tt.desired(), tt.actual(), DefaultOwnership())
			if err != nil {
				t.Fatal(err)
			}
			got := strings.TrimSpace(p.String())
			want := strings.TrimSpace(tt.want)
			if got != want {
				t.Errorf("plan mismatch\n--- want\n%s\n--- got\n%s", want, got)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Spec)
		want   string // substring of the error; "" = valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"allow any host", func(s *Spec) { s.Subsystems[0].AllowAnyHost = true }, "allow any host"},
		{"foreign subsystem", func(s *Spec) { s.Subsystems[0].NQN = "nqn.2014-08.com.example:x"; s.Ports[0].Subsystems = nil }, "not owned"},
		{"foreign port", func(s *Spec) { s.Ports[0].ID = 1 }, "not owned"},
		{"unknown host", func(s *Spec) { s.Hosts = nil }, "not in the host list"},
		{"unknown subsystem on port", func(s *Spec) { s.Ports[0].Subsystems = []string{nqnB} }, "not in the subsystem list"},
		{"bad address", func(s *Spec) { s.Ports[0].Address = "10.0.0" }, "address"},
		{"family mismatch", func(s *Spec) { s.Ports[0].Family = "ipv6" }, "family"},
		{"bad service id", func(s *Spec) { s.Ports[0].ServiceID = "x" }, "service id"},
		{"bad transport", func(s *Spec) { s.Ports[0].Transport = "udp" }, "unknown transport"},
		{"loop with address", func(s *Spec) { s.Ports[0].Transport = Loop }, "loop ports take no address"},
		{"nsid 0", func(s *Spec) { s.Subsystems[0].Namespaces[0].NSID = 0 }, "reserved"},
		{"relative device", func(s *Spec) { s.Subsystems[0].Namespaces[0].DevicePath = "vda" }, "not absolute"},
		{"bad uuid", func(s *Spec) { s.Subsystems[0].Namespaces[0].UUID = "xyz" }, "invalid UUID"},
		{"ana group range", func(s *Spec) { s.Ports[0].ANAStates = map[uint32]ANAState{129: Optimized} }, "out of range"},
		{"ana state", func(s *Spec) { s.Ports[0].ANAStates = map[uint32]ANAState{1: "fast"} }, "unknown state"},
		{"serial padded", func(s *Spec) { s.Subsystems[0].Serial = "abc " }, "spaces"},
		{"serial too long", func(s *Spec) { s.Subsystems[0].Serial = strings.Repeat("x", 21) }, "serial"},
		{"bad nqn", func(s *Spec) { s.Hosts[0].NQN = "host1" }, "invalid NQN"},
		{"bad key", func(s *Spec) { s.Hosts[0].DHCHAPKey = "secret" }, "DHHC-1"},
		{"tls on rdma", func(s *Spec) { s.Ports[0].Transport = RDMA; s.Ports[0].TLS = true }, "TLS"},
		{"tls optional without tls", func(s *Spec) { s.Ports[0].TLSOptional = true }, "TLS optional needs TLS"},
		{"duplicate subsystem", func(s *Spec) { s.Subsystems = append(s.Subsystems, s.Subsystems[0]) }, "twice"},
		{"cntlid range", func(s *Spec) { s.Subsystems[0].CntlIDMin, s.Subsystems[0].CntlIDMax = 1000, 1998 }, ""},
		{"cntlid min only", func(s *Spec) { s.Subsystems[0].CntlIDMin = 1000 }, "controller id range"},
		{"cntlid inverted", func(s *Spec) { s.Subsystems[0].CntlIDMin, s.Subsystems[0].CntlIDMax = 2000, 1000 }, "controller id range"},
		{"cntlid too high", func(s *Spec) { s.Subsystems[0].CntlIDMin, s.Subsystems[0].CntlIDMax = 1, 0xfff0 }, "controller id range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base()
			tt.modify(&s)
			err := s.Validate(DefaultOwnership())
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestErrorIs(t *testing.T) {
	err := newError("write", "ports/1/addr_traddr", "10.0.0.1", errors.New("x"))
	var e *Error
	if !errors.As(err, &e) || e.Path != "ports/1/addr_traddr" {
		t.Fatalf("errors.As: %v", err)
	}
	if !strings.Contains(err.Error(), `write ports/1/addr_traddr = "10.0.0.1"`) {
		t.Fatalf("message %q does not name the path and value", err)
	}
}

// Two reconcilers with split ownership do not undo each other.
func TestSplitOwnership(t *testing.T) {
	drive := "nqn.2026-11.io.fabraid:drive:S123"
	drives := Spec{
		Hosts:      []Host{{NQN: hostX}},
		Subsystems: []Subsystem{{NQN: drive, AllowedHosts: []string{hostX}, Namespaces: []Namespace{{NSID: 1, DevicePath: "/dev/nvme0n1"}}}},
		Ports:      []Port{{ID: 18100, Transport: TCP, Address: "10.0.0.1", ServiceID: "4420", Subsystems: []string{drive}}},
	}
	vols := base()
	vols.Ports[0].ID = 18000
	vols.Ports[0].ServiceID = "4421"
	// The node runs both; each reconciler sees everything.
	both := converged(Spec{
		Hosts:      drives.Hosts,
		Subsystems: append(slices.Clone(drives.Subsystems), vols.Subsystems...),
		Ports:      append(slices.Clone(drives.Ports), vols.Ports...),
	})
	for _, tc := range []struct {
		name string
		own  Ownership
		spec Spec
	}{{"volumes", VolumeOwnership(), vols}, {"drives", DriveOwnership(), drives}} {
		p, err := Diff(tc.spec, both, tc.own)
		if err != nil || len(p) != 0 {
			t.Errorf("%s: converged node gives plan (%v):\n%s", tc.name, err, p)
		}
	}
	// The volume manager removes all its volumes: the drive export and the
	// shared host stay.
	p, err := Diff(Spec{}, both, VolumeOwnership())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range p {
		if strings.Contains(o.Path, "drive:") || strings.Contains(o.Path, "18100") || o.Path == "hosts/"+hostX {
			t.Errorf("volume teardown touches a drive object or the shared host: %s", o)
		}
	}
	if _, err := Diff(drives, both, VolumeOwnership()); err == nil {
		t.Error("a volume reconciler accepted a drive spec")
	}
}
