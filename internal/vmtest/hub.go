package vmtest

import (
	"fmt"
	"net"
	"sync"
)

// hub is a learning Ethernet switch between guests, relaying the frames
// qemu's "-netdev dgram" sends as UDP datagrams on 127.0.0.1. Guest i sends
// to hub port ports[i].hub and receives on ports[i].guest. Nothing leaves
// loopback. A partition between two ports drops every frame between them,
// both ways, broadcast included; it applies to every frame the hub reads
// after it was set.
type hub struct {
	conns  []*net.UDPConn
	guests []*net.UDPAddr
	mu     sync.Mutex
	macs   map[[6]byte]int
	cut    map[[2]int]bool // {i, j} with i < j: no frames between i and j
	wg     sync.WaitGroup
}

// newHub opens one hub socket per guest and reserves a guest port for each.
func newHub(n int) (*hub, error) {
	h := &hub{macs: map[[6]byte]int{}, cut: map[[2]int]bool{}}
	for i := 0; i < n; i++ {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("vmtest: hub socket: %w", err)
		}
		h.conns = append(h.conns, c)
		port, err := freeUDPPort()
		if err != nil {
			h.Close()
			return nil, err
		}
		h.guests = append(h.guests, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	}
	for i := range h.conns {
		h.wg.Add(1)
		go h.relay(i)
	}
	return h, nil
}

// ports returns guest i's (qemu local, hub) UDP ports.
func (h *hub) ports(i int) (guest, hubPort int) {
	return h.guests[i].Port, h.conns[i].LocalAddr().(*net.UDPAddr).Port
}

func (h *hub) relay(i int) {
	defer h.wg.Done()
	buf := make([]byte, 65536)
	var to []int
	for {
		n, _, err := h.conns[i].ReadFromUDP(buf)
		if err != nil {
			return
		}
		if n < 14 {
			continue
		}
		var dst, src [6]byte
		copy(dst[:], buf[0:6])
		copy(src[:], buf[6:12])
		h.mu.Lock()
		h.macs[src] = i
		out, known := h.macs[dst]
		to = to[:0]
		for j := range h.conns {
			if j != i && (!known || j == out) && !h.cut[pair(i, j)] {
				to = append(to, j)
			}
		}
		h.mu.Unlock()
		for _, j := range to {
			h.conns[j].WriteToUDP(buf[:n], h.guests[j])
		}
	}
}

func pair(i, j int) [2]int {
	if i > j {
		i, j = j, i
	}
	return [2]int{i, j}
}

// setCut partitions (on) or heals the ports i and j.
func (h *hub) setCut(i, j int, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if on {
		h.cut[pair(i, j)] = true
	} else {
		delete(h.cut, pair(i, j))
	}
}

// healAll removes every partition.
func (h *hub) healAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.cut)
}

// Close stops the relays.
func (h *hub) Close() {
	for _, c := range h.conns {
		c.Close()
	}
	h.wg.Wait()
}

// freeUDPPort finds a UDP port on 127.0.0.1 that is free right now.
func freeUDPPort() (int, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, fmt.Errorf("vmtest: find a free UDP port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}
