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
	// portCut: no IP (v4 or v6) TCP or UDP frames between i and j whose
	// source or destination port is in the set; other frames pass.
	portCut map[[2]int]map[uint16]bool
	wg      sync.WaitGroup
}

// newHub opens one hub socket per guest and reserves a guest port for each.
func newHub(n int) (*hub, error) {
	h := &hub{macs: map[[6]byte]int{}, cut: map[[2]int]bool{}, portCut: map[[2]int]map[uint16]bool{}}
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
			if j != i && (!known || j == out) && !h.dropped(i, j, buf[:n]) {
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

// dropped reports whether a partition drops frame between ports i and j;
// h.mu is held.
func (h *hub) dropped(i, j int, frame []byte) bool {
	p := pair(i, j)
	if h.cut[p] {
		return true
	}
	ports := h.portCut[p]
	if len(ports) == 0 {
		return false
	}
	src, dst, ok := l4Ports(frame)
	return ok && (ports[src] || ports[dst])
}

// l4Ports returns the TCP or UDP ports of an IPv4 or IPv6 Ethernet frame
// (the first fragment's, for IPv4; IPv6 without extension headers).
func l4Ports(f []byte) (src, dst uint16, ok bool) {
	if len(f) < 14 {
		return 0, 0, false
	}
	var proto byte
	var l4 int
	switch uint16(f[12])<<8 | uint16(f[13]) {
	case 0x0800:
		if len(f) < 34 || f[20]&0x1f != 0 || f[21] != 0 { // a later fragment: no ports
			return 0, 0, false
		}
		proto, l4 = f[23], 14+int(f[14]&0x0f)*4
	case 0x86dd:
		proto, l4 = f[20], 14+40
	default:
		return 0, 0, false
	}
	if (proto != 6 && proto != 17) || len(f) < l4+4 {
		return 0, 0, false
	}
	return uint16(f[l4])<<8 | uint16(f[l4+1]), uint16(f[l4+2])<<8 | uint16(f[l4+3]), true
}

// setCut partitions (on) or heals the ports i and j: all their traffic,
// or with ports only the TCP and UDP traffic from or to those ports
// (added to the ones cut before). Healing removes both kinds.
func (h *hub) setCut(i, j int, on bool, ports ...uint16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := pair(i, j)
	switch {
	case !on:
		delete(h.cut, p)
		delete(h.portCut, p)
	case len(ports) == 0:
		h.cut[p] = true
	default:
		if h.portCut[p] == nil {
			h.portCut[p] = map[uint16]bool{}
		}
		for _, port := range ports {
			h.portCut[p][port] = true
		}
	}
}

// healAll removes every partition.
func (h *hub) healAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.cut)
	clear(h.portCut)
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
