package nvmet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// model is a small in-memory stand-in for the nvmet configfs tree, used only
// to check that plans respect the ordering rules the kernel enforces
// (drivers/nvme/target/configfs.c) and that they converge. It is not a
// fake to test against in place of the kernel: the semantics are proven in
// the guest tests; this explores many more state pairs than a guest can.
//
// Rules modelled: mkdir needs its parent; rmdir of a subsystem needs no
// namespaces and no allowed_hosts links and no port linking it (configfs
// refuses ENOTEMPTY / we never rely on dangling links); rmdir of a host
// needs no subsystem allowing it; rmdir of a port needs no links,
// referrals or ANA groups > 1; port address attributes fail with EACCES
// while a subsystem is linked; namespace device_path/uuid/nguid fail with
// EBUSY while enabled; enable needs a device path; allowed_hosts links fail
// while allow_any_host is set; links need their target.
type model struct{ s Spec }

var errModel = errors.New("model refuses")

func (m *model) sub(nqn string) *Subsystem {
	for i := range m.s.Subsystems {
		if m.s.Subsystems[i].NQN == nqn {
			return &m.s.Subsystems[i]
		}
	}
	return nil
}

func (m *model) port(id string) *Port {
	n, _ := strconv.Atoi(id)
	for i := range m.s.Ports {
		if int(m.s.Ports[i].ID) == n {
			return &m.s.Ports[i]
		}
	}
	return nil
}

func (m *model) hostIdx(nqn string) int {
	return slices.IndexFunc(m.s.Hosts, func(h Host) bool { return h.NQN == nqn })
}

func fail(o Op, why string) error { return fmt.Errorf("%w: %s: %s", errModel, o, why) }

func (m *model) exec(o Op) error {
	p := strings.Split(o.Path, "/")
	switch {
	case p[0] == "hosts" && len(p) == 2:
		i := m.hostIdx(p[1])
		switch o.Kind {
		case OpMkdir:
			if i >= 0 {
				return fail(o, "exists")
			}
			m.s.Hosts = append(m.s.Hosts, Host{NQN: p[1]})
		case OpRmdir:
			if i < 0 {
				return fail(o, "missing")
			}
			for _, s := range m.s.Subsystems {
				if slices.Contains(s.AllowedHosts, p[1]) {
					return fail(o, "still allowed by "+s.NQN)
				}
			}
			m.s.Hosts = slices.Delete(m.s.Hosts, i, i+1)
		default:
			return fail(o, "bad op")
		}
	case p[0] == "hosts" && len(p) == 3 && o.Kind == OpWrite:
		i := m.hostIdx(p[1])
		if i < 0 {
			return fail(o, "no host")
		}
		h := &m.s.Hosts[i]
		if o.Value == "" {
			return nil // configfs drops empty writes before the store function
		}
		switch p[2] {
		case "dhchap_key":
			h.DHCHAPKey = o.Value
		case "dhchap_ctrl_key":
			h.DHCHAPCtrlKey = o.Value
		case "dhchap_hash":
			h.DHCHAPHash = o.Value
		case "dhchap_dhgroup":
			h.DHCHAPDHGroup = o.Value
		default:
			return fail(o, "bad attribute")
		}
	case p[0] == "subsystems" && len(p) == 2:
		s := m.sub(p[1])
		switch o.Kind {
		case OpMkdir:
			if s != nil {
				return fail(o, "exists")
			}
			m.s.Subsystems = append(m.s.Subsystems, Subsystem{NQN: p[1]})
		case OpRmdir:
			if s == nil {
				return fail(o, "missing")
			}
			if len(s.Namespaces) > 0 || len(s.AllowedHosts) > 0 {
				return fail(o, "not empty")
			}
			for _, pt := range m.s.Ports {
				if slices.Contains(pt.Subsystems, p[1]) {
					return fail(o, "still linked on a port")
				}
			}
			m.s.Subsystems = slices.DeleteFunc(m.s.Subsystems, func(x Subsystem) bool { return x.NQN == p[1] })
		default:
			return fail(o, "bad op")
		}
	case p[0] == "subsystems" && len(p) == 3 && o.Kind == OpWrite:
		s := m.sub(p[1])
		if s == nil {
			return fail(o, "no subsystem")
		}
		switch p[2] {
		case "attr_serial":
			s.Serial = o.Value
		case "attr_model":
			s.Model = o.Value
		case "attr_firmware":
			s.Firmware = o.Value
		case "attr_cntlid_min", "attr_cntlid_max":
			// EINVAL when the write would leave min > max.
			n, err := strconv.ParseUint(o.Value, 10, 16)
			if err != nil || n == 0 || n > MaxCntlID {
				return fail(o, "EINVAL")
			}
			lo, hi := cntlMin(s), cntlMax(s)
			if p[2] == "attr_cntlid_min" {
				lo = uint16(n)
			} else {
				hi = uint16(n)
			}
			if lo > hi {
				return fail(o, "EINVAL: min > max")
			}
			s.CntlIDMin, s.CntlIDMax = lo, hi
			if lo == 1 && hi == MaxCntlID {
				s.CntlIDMin, s.CntlIDMax = 0, 0
			}
		case "attr_allow_any_host":
			if o.Value == "1" && len(s.AllowedHosts) > 0 {
				return fail(o, "hosts listed")
			}
			s.AllowAnyHost = o.Value == "1"
		default:
			return fail(o, "bad attribute")
		}
	case p[0] == "subsystems" && len(p) == 4 && p[2] == "allowed_hosts":
		s := m.sub(p[1])
		if s == nil {
			return fail(o, "no subsystem")
		}
		switch o.Kind {
		case OpLink:
			if m.hostIdx(p[3]) < 0 || o.Target != "hosts/"+p[3] {
				return fail(o, "no such host")
			}
			if s.AllowAnyHost {
				return fail(o, "allow_any_host set")
			}
			if slices.Contains(s.AllowedHosts, p[3]) {
				return fail(o, "exists")
			}
			s.AllowedHosts = append(s.AllowedHosts, p[3])
		case OpUnlink:
			if !slices.Contains(s.AllowedHosts, p[3]) {
				return fail(o, "missing")
			}
			s.AllowedHosts = slices.DeleteFunc(s.AllowedHosts, func(x string) bool { return x == p[3] })
		default:
			return fail(o, "bad op")
		}
	case p[0] == "subsystems" && len(p) >= 4 && p[2] == "namespaces":
		s := m.sub(p[1])
		if s == nil {
			return fail(o, "no subsystem")
		}
		id, _ := strconv.Atoi(p[3])
		i := slices.IndexFunc(s.Namespaces, func(n Namespace) bool { return int(n.NSID) == id })
		if len(p) == 4 {
			switch o.Kind {
			case OpMkdir:
				if i >= 0 {
					return fail(o, "exists")
				}
				s.Namespaces = append(s.Namespaces, Namespace{NSID: uint32(id), Disabled: true, ANAGroup: 1, NGUID: "00000000-0000-0000-0000-000000000000", UUID: "aaaaaaaa-0000-4000-8000-000000000000"})
			case OpRmdir:
				if i < 0 {
					return fail(o, "missing")
				}
				s.Namespaces = slices.Delete(s.Namespaces, i, i+1)
			default:
				return fail(o, "bad op")
			}
			return nil
		}
		if i < 0 || o.Kind != OpWrite {
			return fail(o, "no namespace")
		}
		ns := &s.Namespaces[i]
		switch p[4] {
		case "device_path", "device_uuid", "device_nguid":
			if !ns.Disabled {
				return fail(o, "EBUSY: enabled")
			}
			switch p[4] {
			case "device_path":
				ns.DevicePath = o.Value
			case "device_uuid":
				ns.UUID = o.Value
			default:
				ns.NGUID = o.Value
			}
		case "ana_grpid":
			g, _ := strconv.Atoi(o.Value)
			ns.ANAGroup = uint32(g)
		case "enable":
			if o.Value == "1" && ns.DevicePath == "" {
				return fail(o, "no device")
			}
			ns.Disabled = o.Value != "1"
		default:
			return fail(o, "bad attribute")
		}
	case p[0] == "ports" && len(p) == 2:
		pt := m.port(p[1])
		switch o.Kind {
		case OpMkdir:
			if pt != nil {
				return fail(o, "exists")
			}
			id, _ := strconv.Atoi(p[1])
			m.s.Ports = append(m.s.Ports, Port{ID: uint16(id), ANAStates: map[uint32]ANAState{1: Optimized}})
		case OpRmdir:
			if pt == nil {
				return fail(o, "missing")
			}
			if len(pt.Subsystems) > 0 || len(pt.Referrals) > 0 || len(pt.ANAStates) > 1 {
				return fail(o, "not empty")
			}
			m.s.Ports = slices.DeleteFunc(m.s.Ports, func(x Port) bool { return x.ID == pt.ID })
		default:
			return fail(o, "bad op")
		}
	case p[0] == "ports" && len(p) == 3 && o.Kind == OpWrite:
		pt := m.port(p[1])
		if pt == nil {
			return fail(o, "no port")
		}
		if len(pt.Subsystems) > 0 {
			return fail(o, "EACCES: port enabled")
		}
		switch p[2] {
		case "addr_trtype":
			pt.Transport, pt.TLS = Transport(o.Value), false
		case "addr_adrfam":
			pt.Family = o.Value
		case "addr_traddr":
			pt.Address = o.Value
		case "addr_trsvcid":
			pt.ServiceID = o.Value
		case "addr_tsas":
			pt.TLS, pt.TLSOptional = o.Value == "tls1.3", false
		case "addr_treq":
			if pt.TLS && o.Value == "not specified" {
				return fail(o, "EINVAL: treq not specified with tls1.3")
			}
			pt.TLSOptional = pt.TLS && o.Value == "not required"
		default:
			return fail(o, "bad attribute")
		}
	case p[0] == "ports" && len(p) == 4 && p[2] == "subsystems":
		pt := m.port(p[1])
		if pt == nil {
			return fail(o, "no port")
		}
		switch o.Kind {
		case OpLink:
			if m.sub(p[3]) == nil || o.Target != "subsystems/"+p[3] {
				return fail(o, "no such subsystem")
			}
			if slices.Contains(pt.Subsystems, p[3]) {
				return fail(o, "exists")
			}
			pt.Subsystems = append(pt.Subsystems, p[3])
		case OpUnlink:
			if !slices.Contains(pt.Subsystems, p[3]) {
				return fail(o, "missing")
			}
			pt.Subsystems = slices.DeleteFunc(pt.Subsystems, func(x string) bool { return x == p[3] })
		default:
			return fail(o, "bad op")
		}
	case p[0] == "ports" && len(p) == 4 && p[2] == "referrals" && o.Kind == OpRmdir:
		pt := m.port(p[1])
		if pt == nil || !slices.Contains(pt.Referrals, p[3]) {
			return fail(o, "missing")
		}
		pt.Referrals = slices.DeleteFunc(pt.Referrals, func(x string) bool { return x == p[3] })
	case p[0] == "ports" && len(p) >= 4 && p[2] == "ana_groups":
		pt := m.port(p[1])
		if pt == nil {
			return fail(o, "no port")
		}
		g64, _ := strconv.Atoi(p[3])
		g := uint32(g64)
		_, exists := pt.ANAStates[g]
		switch {
		case len(p) == 4 && o.Kind == OpMkdir:
			if exists || g < 2 {
				return fail(o, "exists")
			}
			pt.ANAStates[g] = Inaccessible
		case len(p) == 4 && o.Kind == OpRmdir:
			if !exists || g < 2 {
				return fail(o, "missing or default")
			}
			delete(pt.ANAStates, g)
		case len(p) == 5 && o.Kind == OpWrite && p[4] == "ana_state":
			if !exists {
				return fail(o, "no group")
			}
			pt.ANAStates[g] = ANAState(o.Value)
		default:
			return fail(o, "bad op")
		}
	default:
		return fail(o, "unknown path")
	}
	return nil
}

const foreignSub = "nqn.2014-08.com.example:foreign"

// randSpec draws a valid desired Spec from a small universe, so that
// random pairs overlap a lot.
func randSpec(r *rand.Rand) Spec {
	hostsU := []string{hostX, hostY}
	subsU := []string{nqnA, nqnB}
	var s Spec
	for _, h := range hostsU {
		if r.IntN(3) > 0 {
			hh := Host{NQN: h}
			if r.IntN(3) == 0 {
				hh.DHCHAPKey = []string{"DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:", "DHHC-1:00:bmV3a2V5bmV3a2V5bmV3a2V5bmV3a2V5bmV3a2V5MTIzNA==:"}[r.IntN(2)]
				if r.IntN(2) == 0 {
					hh.DHCHAPHash = "hmac(sha512)"
				}
			}
			s.Hosts = append(s.Hosts, hh)
		}
	}
	for _, n := range subsU {
		if r.IntN(4) == 0 {
			continue
		}
		sub := Subsystem{NQN: n, Model: []string{"", "fabraid"}[r.IntN(2)]}
		if r.IntN(2) == 0 {
			// Ranges that overlap, lie above and below each other.
			lo := []uint16{1, 1001, 2001}[r.IntN(3)]
			sub.CntlIDMin, sub.CntlIDMax = lo, lo+999
		}
		for _, h := range s.Hosts {
			if r.IntN(2) == 0 {
				sub.AllowedHosts = append(sub.AllowedHosts, h.NQN)
			}
		}
		for id := uint32(1); id <= 2; id++ {
			if r.IntN(3) == 0 {
				continue
			}
			ns := Namespace{NSID: id, DevicePath: []string{"/dev/vda", "/dev/vdb"}[r.IntN(2)], ANAGroup: uint32(r.IntN(3))}
			if r.IntN(2) == 0 {
				ns.UUID = []string{uuid1, "0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9aa"}[r.IntN(2)]
			}
			ns.Disabled = r.IntN(5) == 0
			sub.Namespaces = append(sub.Namespaces, ns)
		}
		s.Subsystems = append(s.Subsystems, sub)
	}
	for _, id := range []uint16{18001, 18002} {
		if r.IntN(4) == 0 {
			continue
		}
		p := Port{ID: id, Transport: TCP, Address: []string{"10.0.0.1", "10.0.0.2", "fd00::1"}[r.IntN(3)], ServiceID: []string{"4420", "4421"}[r.IntN(2)]}
		if r.IntN(4) == 0 {
			p.TLS, p.TLSOptional = true, r.IntN(2) == 0
		}
		if r.IntN(5) == 0 {
			p.Transport, p.Address, p.ServiceID, p.TLS, p.TLSOptional = Loop, "", "", false, false
		}
		for _, sub := range s.Subsystems {
			if r.IntN(3) > 0 {
				p.Subsystems = append(p.Subsystems, sub.NQN)
			}
		}
		if r.IntN(2) == 0 {
			p.ANAStates = map[uint32]ANAState{}
			for g := uint32(1); g <= 3; g++ {
				if r.IntN(2) == 0 {
					p.ANAStates[g] = []ANAState{Optimized, NonOptimized, Inaccessible}[r.IntN(3)]
				}
			}
		}
		s.Ports = append(s.Ports, p)
	}
	return s
}

// randActual builds a state the kernel could be in: a random spec applied
// (by the model, from empty), then random kernel-legal disturbances: a
// foreign subsystem and port, allow_any_host, a referral, a half-made
// namespace, an extra ANA group.
func randActual(t *testing.T, r *rand.Rand) *model {
	m := &model{}
	p, err := Diff(randSpec(r), State{}, DefaultOwnership())
	if err != nil {
		t.Fatal(err)
	}
	// Sometimes only part of it happened (a crash).
	if r.IntN(3) == 0 {
		p = p[:r.IntN(len(p)+1)]
	}
	for _, o := range p {
		if err := m.exec(o); err != nil {
			t.Fatalf("building actual: %v", err)
		}
	}
	m.s.Subsystems = append(m.s.Subsystems, Subsystem{NQN: foreignSub, AllowAnyHost: r.IntN(2) == 0})
	if h := m.hostIdx(hostY); h >= 0 && r.IntN(2) == 0 && !m.s.Subsystems[len(m.s.Subsystems)-1].AllowAnyHost {
		m.s.Subsystems[len(m.s.Subsystems)-1].AllowedHosts = []string{hostY}
	}
	m.s.Ports = append(m.s.Ports, Port{ID: 7, Transport: TCP, Address: "10.9.9.9", ServiceID: "4420", ANAStates: map[uint32]ANAState{1: Optimized},
		Subsystems: []string{foreignSub}})
	for i := range m.s.Subsystems {
		s := &m.s.Subsystems[i]
		if s.NQN != foreignSub && len(s.AllowedHosts) == 0 && r.IntN(4) == 0 {
			s.AllowAnyHost = true
		}
	}
	for i := range m.s.Ports {
		pt := &m.s.Ports[i]
		if pt.ID == 7 {
			continue
		}
		if r.IntN(4) == 0 {
			pt.Referrals = []string{"r1"}
		}
		if r.IntN(4) == 0 {
			pt.ANAStates[5] = NonOptimized
		}
		if r.IntN(4) == 0 && m.sub(nqnA) != nil {
			pt.Subsystems = append(slices.DeleteFunc(pt.Subsystems, func(x string) bool { return x == nqnA }), nqnA)
			if fp := m.port("7"); !slices.Contains(fp.Subsystems, nqnA) {
				fp.Subsystems = append(fp.Subsystems, nqnA) // a foreign port links ours
			}
		}
	}
	return m
}

// TestDiffModel: for many random (desired, actual) pairs, the plan
// executes under the kernel's ordering rules, converges (a second Diff is
// empty), and leaves foreign objects as they were.
func TestDiffModel(t *testing.T) {
	seed := uint64(rand.Int64())
	if s := os.Getenv("TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("TEST_SEED=%d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := 0; i < n; i++ {
		m := randActual(t, r)
		desired := randSpec(r)
		before := sortSpec(m.s)
		plan, err := Diff(desired, State{Spec: m.s, Features: Features{Firmware: true, Auth: true, TLS: true}}, DefaultOwnership())
		if errors.Is(err, ErrKeyClearBlocked) {
			continue
		}
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		for _, o := range plan {
			if err := m.exec(o); err != nil {
				t.Fatalf("case %d: %v\nplan:\n%s\nactual before: %+v", i, err, plan, before)
			}
		}
		again, err := Diff(desired, State{Spec: m.s, Features: Features{Firmware: true, Auth: true, TLS: true}}, DefaultOwnership())
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != 0 {
			t.Fatalf("case %d: not converged; second plan:\n%s\nfirst plan:\n%s\ndesired %+v", i, again, plan, desired)
		}
		after := sortSpec(m.s)
		fs := func(s Spec) string {
			var b strings.Builder
			for _, x := range s.Subsystems {
				if x.NQN == foreignSub {
					fmt.Fprintf(&b, "%+v", x)
				}
			}
			for _, x := range s.Ports {
				if x.ID == 7 {
					fmt.Fprintf(&b, "%v %v", x.Address, slices.DeleteFunc(slices.Clone(x.Subsystems), func(n string) bool { return n != foreignSub }))
				}
			}
			return b.String()
		}
		if fs(before) != fs(after) {
			t.Fatalf("case %d: foreign objects changed:\n%s\n%s", i, fs(before), fs(after))
		}
	}
}
