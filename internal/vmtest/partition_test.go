package vmtest

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"
)

// netProbe is one guest's side of TestIntegrationPartition: a TCP
// listener on :7000 that accepts and closes, and the datagrams that
// arrive on UDP :7001.
type netProbe struct {
	t     *testing.T
	g     *Env
	udp   net.PacketConn
	dgram chan string
}

func newNetProbe(t *testing.T, g *Env) *netProbe {
	l, err := net.Listen("tcp", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
		})
	}}
	u, err := lc.ListenPacket(context.Background(), "udp4", ":7001")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	p := &netProbe{t: t, g: g, udp: u, dgram: make(chan string, 16)}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			p.dgram <- string(buf[:n])
		}
	}()
	return p
}

// reaches reports whether a TCP connection to peer is set up. A
// connection across a partition never is: 2 s only bounds how long that
// takes to show, a connection that should work gets 30 s.
func (p *netProbe) reaches(peer string, expect bool) {
	p.t.Helper()
	timeout := 30 * time.Second
	if !expect {
		timeout = 2 * time.Second
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(p.g.Addr(peer), "7000"), timeout)
	if err == nil {
		c.Close()
	}
	if got := err == nil; got != expect {
		p.t.Errorf("%s reaches %s: %v (%v), want %v", p.g.Name, peer, got, err, expect)
	}
}

// send sends a datagram to addr:7001 (a broadcast address too).
func (p *netProbe) send(addr, msg string) {
	p.t.Helper()
	if _, err := p.udp.WriteTo([]byte(msg), &net.UDPAddr{IP: net.ParseIP(addr), Port: 7001}); err != nil {
		p.t.Fatalf("send %q to %s: %v", msg, addr, err)
	}
}

// until returns the datagrams received before msg, failing if msg does
// not come.
func (p *netProbe) until(msg string) []string {
	p.t.Helper()
	var before []string
	for {
		select {
		case m := <-p.dgram:
			if m == msg {
				return before
			}
			before = append(before, m)
		case <-time.After(60 * time.Second):
			p.t.Fatalf("%s: no datagram %q (got %v)", p.g.Name, msg, before)
		}
	}
}

const broadcast = "169.254.255.255"

// TestIntegrationPartition partitions a from b: TCP between them fails
// both ways and a's broadcast reaches c but not b, while a-c and b-c
// work; healed, a and b talk again. Isolated, a reaches nobody while b-c
// works; healed, everyone. With only TCP port 7000 cut between a and b,
// a cannot connect to b's :7000 but its datagram to b's UDP :7001 arrives.
func TestIntegrationPartition(t *testing.T) {
	Run(t, Options{Timeout: 2 * time.Minute, Guests: []GuestConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}}}, func(t *testing.T, g *Env) {
		p := newNetProbe(t, g)
		g.Signal(t, "listening")
		for _, peer := range g.Guests() {
			g.Wait(t, peer, "listening")
		}
		switch g.Name {
		case "a":
			p.reaches("b", true)
			p.reaches("c", true)
			g.Partition(t, "a", "b")
			g.Signal(t, "cut")
			p.reaches("b", false)
			p.reaches("c", true)
			p.send(broadcast, "cut-broadcast")
			g.Wait(t, "b", "checked")
			g.Heal(t)
			p.reaches("b", true)
			p.send(broadcast, "healed-broadcast")
			g.Wait(t, "b", "got-healed")
			g.Isolate(t, "a")
			p.reaches("b", false)
			p.reaches("c", false)
			g.Signal(t, "isolated")
			g.Wait(t, "b", "reached-c")
			g.Heal(t, "a")
			p.reaches("b", true)
			p.reaches("c", true)
			g.PartitionPorts(t, "a", "b", 7000) // TCP :7000 cut, UDP :7001 not
			p.reaches("b", false)
			p.send(g.Addr("b"), "port-cut-udp")
			g.Wait(t, "b", "got-udp")
			g.Heal(t, "a", "b")
			p.reaches("b", true)
			g.Signal(t, "done")
		case "b":
			g.Wait(t, "a", "cut")
			p.reaches("a", false)
			p.reaches("c", true)
			// c sends "fence" after it got a's broadcast; the hub relays
			// a's frames to b before c, so a broadcast that crossed the
			// partition would be here first.
			if before := p.until("fence"); len(before) > 0 {
				t.Errorf("b received %v across the partition", before)
			}
			g.Signal(t, "checked")
			p.until("healed-broadcast")
			g.Signal(t, "got-healed")
			g.Wait(t, "a", "isolated")
			p.reaches("c", true)
			g.Signal(t, "reached-c")
			p.until("port-cut-udp")
			g.Signal(t, "got-udp")
			g.Wait(t, "a", "done")
		case "c":
			p.until("cut-broadcast")
			p.send(g.Addr("b"), "fence")
			p.until("healed-broadcast")
			g.Wait(t, "a", "done")
		}
	})
}
