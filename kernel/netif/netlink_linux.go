package netif

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Addresses lists every address on every interface.
func Addresses() ([]Addr, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []Addr
	for _, l := range links {
		attrs := l.Attrs()
		as, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list addresses of %s: %w", attrs.Name, err)
		}
		up := linkUp(attrs)
		for _, a := range as {
			p, ok := prefixOf(a.IPNet)
			if !ok {
				continue
			}
			out = append(out, Addr{Iface: attrs.Name, Index: attrs.Index, Up: up, Prefix: p})
		}
	}
	return out, nil
}

// Find returns the addresses sel matches (Addresses + Select).
func Find(sel Selector) ([]Addr, error) {
	all, err := Addresses()
	if err != nil {
		return nil, err
	}
	return Select(all, sel), nil
}

func linkUp(a *netlink.LinkAttrs) bool {
	if a.Flags&net.FlagUp == 0 {
		return false
	}
	return a.OperState != netlink.OperDown && a.OperState != netlink.OperLowerLayerDown
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones), true
}

// Watch reports link up/down and address add/remove events until ctx ends;
// the channel is closed then. Link events are reported on every change of
// the up state, including the initial state of each link (so a watcher
// starts from a known level).
func Watch(ctx context.Context) (<-chan Event, error) {
	done := make(chan struct{})
	linkCh := make(chan netlink.LinkUpdate, 64)
	addrCh := make(chan netlink.AddrUpdate, 64)
	errCh := make(chan error, 2)
	onErr := func(err error) {
		select {
		case errCh <- err:
		default:
		}
	}
	if err := netlink.LinkSubscribeWithOptions(linkCh, done, netlink.LinkSubscribeOptions{ListExisting: true, ErrorCallback: onErr}); err != nil {
		close(done)
		return nil, fmt.Errorf("watch links: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrCh, done, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		close(done)
		return nil, fmt.Errorf("watch addresses: %w", err)
	}
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		defer close(done)
		last := map[int]bool{}
		names := map[int]string{}
		send := func(e Event) bool {
			select {
			case out <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-errCh:
				return
			case u, ok := <-linkCh:
				if !ok {
					return
				}
				a := u.Attrs()
				names[a.Index] = a.Name
				if u.Header.Type == unix.RTM_DELLINK {
					delete(last, a.Index)
					if !send(Event{Kind: LinkDown, Iface: a.Name, Index: a.Index}) {
						return
					}
					continue
				}
				up := linkUp(a)
				if prev, seen := last[a.Index]; seen && prev == up {
					continue
				}
				last[a.Index] = up
				k := LinkDown
				if up {
					k = LinkUp
				}
				if !send(Event{Kind: k, Iface: a.Name, Index: a.Index}) {
					return
				}
			case u, ok := <-addrCh:
				if !ok {
					return
				}
				p, valid := prefixOf(&u.LinkAddress)
				if !valid {
					continue
				}
				k := AddrRemoved
				if u.NewAddr {
					k = AddrAdded
				}
				name := names[u.LinkIndex]
				if name == "" {
					if l, err := netlink.LinkByIndex(u.LinkIndex); err == nil {
						name = l.Attrs().Name
					}
				}
				if !send(Event{Kind: k, Iface: name, Index: u.LinkIndex, Prefix: p}) {
					return
				}
			}
		}
	}()
	return out, nil
}

// SetLinkUp sets an interface administratively up or down.
func SetLinkUp(iface string, up bool) error {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("link %s: %w", iface, err)
	}
	if up {
		err = netlink.LinkSetUp(l)
	} else {
		err = netlink.LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("set link %s up=%v: %w", iface, up, err)
	}
	return nil
}

// AddAddr adds p to iface (EEXIST is not an error).
func AddAddr(iface string, p netip.Prefix) error {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("link %s: %w", iface, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := netlink.AddrAdd(l, a); err != nil && err != unix.EEXIST {
		return fmt.Errorf("add address %s to %s: %w", p, iface, err)
	}
	return nil
}

// DelAddr removes p from iface (EADDRNOTAVAIL is not an error).
func DelAddr(iface string, p netip.Prefix) error {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("link %s: %w", iface, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := netlink.AddrDel(l, a); err != nil && err != unix.EADDRNOTAVAIL {
		return fmt.Errorf("delete address %s from %s: %w", p, iface, err)
	}
	return nil
}
