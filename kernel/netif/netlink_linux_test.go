package netif

import "testing"

// TestAddresses reads the host's real addresses: rtnetlink dumps need no
// privileges, and every Linux host has lo.
func TestAddresses(t *testing.T) {
	as, err := Addresses()
	if err != nil {
		t.Skipf("rtnetlink not available here: %v", err)
	}
	lo, err := Find(Selector{Iface: "lo", IncludeLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(lo) == 0 {
		t.Fatalf("no address on lo among %v", as)
	}
}
