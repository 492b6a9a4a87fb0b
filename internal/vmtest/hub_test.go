package vmtest

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeGuest stands in for qemu's "-netdev dgram" end of one guest: it
// receives on the guest port and sends to the hub port.
type fakeGuest struct {
	conn *net.UDPConn
	hub  *net.UDPAddr
}

func frame(dst, src byte, payload string) []byte {
	f := make([]byte, 14, 14+len(payload))
	for i := 0; i < 6; i++ {
		f[i] = dst
		f[6+i] = src
	}
	return append(f, payload...)
}

func (g *fakeGuest) recv(t *testing.T) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	g.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := g.conn.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// The hub floods broadcast and unknown destinations to every other guest
// and, once it has learnt where a MAC lives, sends unicast only there.
func TestHubLearningSwitch(t *testing.T) {
	h, err := newHub(3)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var gs []*fakeGuest
	for i := 0; i < 3; i++ {
		gp, hp := h.ports(i)
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: gp})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		gs = append(gs, &fakeGuest{conn: c, hub: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: hp}})
	}
	send := func(from int, f []byte) {
		if _, err := gs[from].conn.WriteToUDP(f, gs[from].hub); err != nil {
			t.Fatal(err)
		}
	}
	// Broadcast from guest 0 (MAC 0xa0) reaches 1 and 2, not 0.
	bc := frame(0xff, 0xa0, "who-has")
	send(0, bc)
	for _, i := range []int{1, 2} {
		if got := gs[i].recv(t); !bytes.Equal(got, bc) {
			t.Fatalf("guest %d got %q, want the broadcast", i, got)
		}
	}
	// Guest 2 (0xa2) answers 0xa0: the hub learnt 0xa0 is guest 0.
	uc := frame(0xa0, 0xa2, "is-at")
	send(2, uc)
	if got := gs[0].recv(t); !bytes.Equal(got, uc) {
		t.Fatalf("guest 0 got %q, want the unicast reply", got)
	}
	// Unicast to 0xa2 now goes to guest 2 only; guest 1 sees nothing.
	uc2 := frame(0xa2, 0xa0, "data")
	send(0, uc2)
	if got := gs[2].recv(t); !bytes.Equal(got, uc2) {
		t.Fatalf("guest 2 got %q, want its unicast", got)
	}
	gs[1].conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _ := gs[1].conn.Read(make([]byte, 2048)); n > 0 {
		t.Errorf("guest 1 received a unicast frame meant for guest 2")
	}
	// Runt frames are dropped, not forwarded.
	send(1, []byte("short"))
	gs[0].conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _ := gs[0].conn.Read(make([]byte, 2048)); n > 0 {
		t.Errorf("runt frame forwarded")
	}
}

// A partition drops every frame between its two ports, both ways and
// broadcast included, and nothing else; heal restores them.
func TestHubPartition(t *testing.T) {
	h, err := newHub(3)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var gs []*fakeGuest
	for i := 0; i < 3; i++ {
		gp, hp := h.ports(i)
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: gp})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		gs = append(gs, &fakeGuest{conn: c, hub: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: hp}})
	}
	send := func(from int, f []byte) {
		if _, err := gs[from].conn.WriteToUDP(f, gs[from].hub); err != nil {
			t.Fatal(err)
		}
	}
	// nothing checks that guest i received nothing but the fence, a
	// frame relayed after the dropped ones were read by the hub.
	nothing := func(i int, fence []byte) {
		t.Helper()
		if got := gs[i].recv(t); !bytes.Equal(got, fence) {
			t.Errorf("guest %d got %q, want only the fence %q", i, got, fence)
		}
	}
	// Learn every MAC (0xa0+i on port i).
	for i := 0; i < 3; i++ {
		send(i, frame(0xff, byte(0xa0+i), "hello"))
		for j := 0; j < 3; j++ {
			if j != i {
				gs[j].recv(t)
			}
		}
	}
	h.setCut(0, 1, true)
	bc := frame(0xff, 0xa0, "arp")
	send(0, bc)
	if got := gs[2].recv(t); !bytes.Equal(got, bc) {
		t.Fatalf("guest 2 got %q, want 0's broadcast", got)
	}
	send(0, frame(0xa1, 0xa0, "to-1"))   // dropped
	send(0, frame(0xa2, 0xa0, "sync-0")) // each port's frames are relayed in order
	send(1, frame(0xa0, 0xa1, "to-0"))   // dropped
	send(1, frame(0xff, 0xa1, "bc-1"))   // reaches 2 only
	got := map[string]bool{}             // from two ports: in either order
	for range 2 {
		if f := gs[2].recv(t); len(f) > 14 {
			got[string(f[14:])] = true
		}
	}
	if !got["sync-0"] || !got["bc-1"] {
		t.Fatalf("guest 2 got %v, want sync-0 and bc-1", got)
	}
	send(2, frame(0xa1, 0xa2, "fence-1"))
	send(2, frame(0xa0, 0xa2, "fence-0"))
	nothing(1, frame(0xa1, 0xa2, "fence-1"))
	nothing(0, frame(0xa0, 0xa2, "fence-0"))
	h.setCut(0, 1, false)
	uc := frame(0xa1, 0xa0, "healed")
	send(0, uc)
	if got := gs[1].recv(t); !bytes.Equal(got, uc) {
		t.Fatalf("after heal guest 1 got %q, want %q", got, uc)
	}
}

// Partition, isolate and heal requests set the hub's cuts exactly.
func TestFleetPartitionRequests(t *testing.T) {
	h, err := newHub(3)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	f := newFleet(t.Context(), t.TempDir(), []*qemuGuest{{name: "a"}, {name: "b"}, {name: "c"}}, h, nil)
	cuts := func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		s := ""
		for _, p := range [][2]int{{0, 1}, {0, 2}, {1, 2}} {
			if h.cut[p] {
				s += string(rune('a'+p[0])) + string(rune('a'+p[1])) + " "
			}
		}
		return s
	}
	for _, step := range []struct {
		req, cuts, err string
	}{
		{"partition a b", "ab ", ""},
		{"partition c b", "ab bc ", ""},
		{"heal b a", "bc ", ""},
		{"isolate a", "ab ac bc ", ""},
		{"heal a", "bc ", ""},
		{"heal", "", ""},
		{"partition a", "", "two guests"},
		{"partition a a", "", "from itself"},
		{"partition a z", "", `no guest named "z"`},
		{"isolate", "", "one guest"},
		{"heal a b c", "", "at most two"},
		{"partition_ports a b 2379 2380", "", ""},
		{"partition_ports a b", "", "a port"},
		{"partition_ports a a 1", "", "from itself"},
		{"partition_ports a b x", "", `bad port "x"`},
	} {
		err := f.handleHostRequest(0, step.req)
		if step.req == "partition_ports a b 2379 2380" {
			h.mu.Lock()
			ports := h.portCut[[2]int{0, 1}]
			h.mu.Unlock()
			if len(ports) != 2 || !ports[2379] || !ports[2380] {
				t.Errorf("%q: port cuts %v", step.req, ports)
			}
			f.handleHostRequest(0, "heal a b")
			h.mu.Lock()
			if len(h.portCut) != 0 {
				t.Errorf("heal a b left port cuts %v", h.portCut)
			}
			h.mu.Unlock()
		}
		if got := cuts(); got != step.cuts {
			t.Errorf("%q: cuts %q, want %q", step.req, got, step.cuts)
		}
		if (err == nil) != (step.err == "") || err != nil && !strings.Contains(err.Error(), step.err) {
			t.Errorf("%q: error %v, want %q", step.req, err, step.err)
		}
	}
}

// ipFrame builds an Ethernet frame of an IPv4 (v6 false) or IPv6 packet
// with protocol proto (6 TCP, 17 UDP) between the ports.
func ipFrame(dst, src byte, v6 bool, proto byte, sport, dport uint16) []byte {
	f := frame(dst, src, "")
	var l4 []byte
	if v6 {
		f[12], f[13] = 0x86, 0xdd
		ip := make([]byte, 40)
		ip[0], ip[6] = 0x60, proto
		f = append(f, ip...)
	} else {
		f[12], f[13] = 0x08, 0x00
		ip := make([]byte, 20)
		ip[0], ip[9] = 0x45, proto
		f = append(f, ip...)
	}
	l4 = []byte{byte(sport >> 8), byte(sport), byte(dport >> 8), byte(dport), 0, 0, 0, 0}
	return append(f, l4...)
}

// A port partition drops exactly the TCP and UDP frames from or to its
// ports between its pair, IPv4 and IPv6; everything else passes.
func TestHubPartitionPorts(t *testing.T) {
	h, err := newHub(3)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.setCut(0, 1, true, 2379, 2380)
	arp := frame(0xff, 0xa0, "arp")
	arp[12], arp[13] = 0x08, 0x06
	frag := ipFrame(0xa1, 0xa0, false, 6, 40000, 2379)
	frag[21] = 1 // a later fragment carries no ports
	for _, c := range []struct {
		name   string
		from   int
		to     int
		f      []byte
		passes bool
	}{
		{"tcp to 2379", 0, 1, ipFrame(0xa1, 0xa0, false, 6, 40000, 2379), false},
		{"tcp reply from 2380", 1, 0, ipFrame(0xa0, 0xa1, false, 6, 2380, 40000), false},
		{"udp to 2379", 0, 1, ipFrame(0xa1, 0xa0, false, 17, 40000, 2379), false},
		{"tcp6 to 2379", 1, 0, ipFrame(0xa0, 0xa1, true, 6, 40000, 2379), false},
		{"tcp to 4420", 0, 1, ipFrame(0xa1, 0xa0, false, 6, 40000, 4420), true},
		{"icmp", 0, 1, ipFrame(0xa1, 0xa0, false, 1, 2379, 2379), true},
		{"arp", 0, 1, arp, true},
		{"later fragment", 0, 1, frag, true},
		{"other pair, tcp to 2379", 0, 2, ipFrame(0xa2, 0xa0, false, 6, 40000, 2379), true},
	} {
		h.mu.Lock()
		dropped := h.dropped(c.from, c.to, c.f)
		h.mu.Unlock()
		if dropped == c.passes {
			t.Errorf("%s: dropped %v, want %v", c.name, dropped, !c.passes)
		}
	}
	h.setCut(0, 1, false)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropped(0, 1, ipFrame(0xa1, 0xa0, false, 6, 40000, 2379)) {
		t.Errorf("healed pair still drops port 2379")
	}
}
