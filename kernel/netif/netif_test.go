package netif

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestSelect(t *testing.T) {
	pf := netip.MustParsePrefix
	addrs := []Addr{
		{Iface: "lo", Index: 1, Up: true, Prefix: pf("127.0.0.1/8")},
		{Iface: "lo", Index: 1, Up: true, Prefix: pf("::1/128")},
		{Iface: "eth0", Index: 2, Up: true, Prefix: pf("10.1.2.3/24")},
		{Iface: "eth0", Index: 2, Up: true, Prefix: pf("fe80::1/64")},
		{Iface: "ib0", Index: 4, Up: true, Prefix: pf("192.168.50.7/24")},
		{Iface: "ib0", Index: 4, Up: true, Prefix: pf("fd00:50::7/64")},
		{Iface: "eth1", Index: 3, Up: false, Prefix: pf("10.1.3.3/24")},
		{Iface: "eth1", Index: 3, Up: false, Prefix: pf("169.254.77.1/16")},
	}
	names := func(as []Addr) []string {
		var s []string
		for _, a := range as {
			s = append(s, a.Iface+" "+a.Prefix.String())
		}
		return s
	}
	tests := []struct {
		name string
		sel  string
		want []string
	}{
		{"by cidr", "10.1.0.0/16", []string{"eth0 10.1.2.3/24", "eth1 10.1.3.3/24"}},
		{"by cidr v6", "fd00:50::/48", []string{"ib0 fd00:50::7/64"}},
		{"by iface keeps link-local", "eth0", []string{"eth0 10.1.2.3/24", "eth0 fe80::1/64"}},
		{"link-local cidr", "169.254.0.0/16", []string{"eth1 169.254.77.1/16"}},
		{"loopback cidr", "127.0.0.0/8", []string{"lo 127.0.0.1/8"}},
		{"nothing", "10.9.0.0/16", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := ParseSelector(tt.sel)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(Select(addrs, sel)); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Select(%q) = %v, want %v", tt.sel, got, tt.want)
			}
		})
	}
	all := names(Select(addrs, Selector{}))
	if len(all) != 4 { // no loopback, no link-local
		t.Fatalf("Select(any) = %v", all)
	}
	for _, bad := range []string{"", "a b", "averyveryverylongname", "eth0:1"} {
		if _, err := ParseSelector(bad); err == nil {
			t.Errorf("ParseSelector(%q) accepted", bad)
		}
	}
}
