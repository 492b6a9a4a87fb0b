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
	} {
		err := f.handleHostRequest(0, step.req)
		if got := cuts(); got != step.cuts {
			t.Errorf("%q: cuts %q, want %q", step.req, got, step.cuts)
		}
		if (err == nil) != (step.err == "") || err != nil && !strings.Contains(err.Error(), step.err) {
			t.Errorf("%q: error %v, want %q", step.req, err, step.err)
		}
	}
}
