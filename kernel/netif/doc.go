// Package netif finds the node's storage addresses and watches them: it
// lists interface addresses (by interface name or by CIDR), reports link
// and address changes as events, and offers the few link/address changes
// fabraid and its tests need. It uses rtnetlink through
// github.com/vishvananda/netlink.
//
// Selection (Select) is pure and table-tested; everything else talks to
// the kernel. Reading needs no privileges; SetLinkUp, AddAddr and DelAddr
// need CAP_NET_ADMIN.
package netif
