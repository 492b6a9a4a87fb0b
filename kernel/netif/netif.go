package netif

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Addr is one address configured on an interface.
type Addr struct {
	Iface  string
	Index  int
	Up     bool // interface administratively up with carrier (IFF_UP and oper state not down)
	Prefix netip.Prefix
}

// Selector chooses storage addresses. Empty fields match everything.
type Selector struct {
	Iface string       // exact interface name
	CIDR  netip.Prefix // addresses inside this network (invalid = any)
	// IncludeLoopback keeps 127.0.0.0/8 and ::1 (off: storage never runs
	// over loopback, except in tests).
	IncludeLoopback bool
	// IncludeLinkLocal keeps fe80::/10 and 169.254.0.0/16.
	IncludeLinkLocal bool
}

// ParseSelector parses "iface", "cidr" or "iface/cidr"-less forms used in
// configuration: a value that parses as a prefix is a CIDR, anything else
// an interface name.
func ParseSelector(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Selector{}, fmt.Errorf("storage network selector: empty")
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return Selector{CIDR: p.Masked(), IncludeLinkLocal: p.Addr().IsLinkLocalUnicast(), IncludeLoopback: p.Addr().IsLoopback()}, nil
	}
	if len(s) > 15 || strings.ContainsAny(s, "/ \t:") {
		return Selector{}, fmt.Errorf("storage network selector %q: neither a CIDR nor an interface name", s)
	}
	return Selector{Iface: s}, nil
}

// Select returns the addresses of addrs that sel matches, in a stable
// order (interface index, then address).
func Select(addrs []Addr, sel Selector) []Addr {
	var out []Addr
	for _, a := range addrs {
		ip := a.Prefix.Addr()
		if sel.Iface != "" && a.Iface != sel.Iface {
			continue
		}
		if sel.CIDR.IsValid() && !sel.CIDR.Contains(ip) {
			continue
		}
		if ip.IsLoopback() && !sel.IncludeLoopback {
			continue
		}
		if ip.IsLinkLocalUnicast() && !sel.IncludeLinkLocal && sel.Iface == "" {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y Addr) int {
		if x.Index != y.Index {
			return x.Index - y.Index
		}
		return x.Prefix.Addr().Compare(y.Prefix.Addr())
	})
	return out
}

// EventKind is what changed.
type EventKind uint8

const (
	LinkUp EventKind = iota + 1
	LinkDown
	AddrAdded
	AddrRemoved
)

func (k EventKind) String() string {
	switch k {
	case LinkUp:
		return "link-up"
	case LinkDown:
		return "link-down"
	case AddrAdded:
		return "addr-added"
	case AddrRemoved:
		return "addr-removed"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one link or address change.
type Event struct {
	Kind   EventKind
	Iface  string
	Index  int
	Prefix netip.Prefix // address events only
}

func (e Event) String() string {
	if e.Prefix.IsValid() {
		return fmt.Sprintf("%s %s %s", e.Kind, e.Iface, e.Prefix)
	}
	return fmt.Sprintf("%s %s", e.Kind, e.Iface)
}
