package vmtest

import (
	"bytes"
	"net"
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
