package vmtest

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
)

// Partition cuts the network between guests a and b, both ways: the hub
// drops every frame between them (unicast, broadcast, ARP) from the
// moment it returns, until Heal. Other pairs are unaffected. Partitions
// are the network's: they outlast a guest's reboot.
func (e *Env) Partition(t testing.TB, a, b string) {
	t.Helper()
	if err := e.hostRequest("partition " + a + " " + b); err != nil {
		t.Fatalf("vmtest: partition %s from %s: %v", a, b, err)
	}
}

// PartitionPorts cuts only the IP traffic between guests a and b that is
// TCP or UDP from or to one of ports (e.g. etcd's 2379 and 2380), both
// ways, until Heal; everything else between them (other ports, ARP, ICMP)
// passes. Calls add ports; a full Partition of the pair overrides it.
func (e *Env) PartitionPorts(t testing.TB, a, b string, ports ...int) {
	t.Helper()
	if len(ports) == 0 {
		t.Fatalf("vmtest: PartitionPorts(%s, %s): no ports", a, b)
	}
	req := "partition_ports " + a + " " + b
	for _, p := range ports {
		req += " " + strconv.Itoa(p)
	}
	if err := e.hostRequest(req); err != nil {
		t.Fatalf("vmtest: partition %s from %s on ports %v: %v", a, b, ports, err)
	}
}

// Isolate partitions guest from every other guest.
func (e *Env) Isolate(t testing.TB, guest string) {
	t.Helper()
	if err := e.hostRequest("isolate " + guest); err != nil {
		t.Fatalf("vmtest: isolate %s: %v", guest, err)
	}
}

// Heal removes partitions (full and PartitionPorts ones): with no guests
// every partition, with one every partition of that guest (undoing
// Isolate), with two the ones between them.
func (e *Env) Heal(t testing.TB, guests ...string) {
	t.Helper()
	if len(guests) > 2 {
		t.Fatalf("vmtest: Heal(%v): give at most two guests", guests)
	}
	req := "heal"
	for _, g := range guests {
		req += " " + g
	}
	if err := e.hostRequest(req); err != nil {
		t.Fatalf("vmtest: heal %v: %v", guests, err)
	}
}

// partition carries out "partition a b" (on) and "heal [a [b]]".
func (f *fleet) partition(on bool, names []string) error {
	if f.hub == nil {
		return errors.New("a single guest has no network")
	}
	idx := make([]int, len(names))
	for k, n := range names {
		i, err := f.index(n)
		if err != nil {
			return err
		}
		idx[k] = i
	}
	switch {
	case on && len(idx) != 2:
		return errors.New("partition needs two guests")
	case len(idx) == 2 && idx[0] == idx[1]:
		return fmt.Errorf("cannot partition guest %s from itself", names[0])
	case len(idx) == 2:
		f.hub.setCut(idx[0], idx[1], on)
	case len(idx) == 1:
		f.setCutAll(idx[0], false)
	case len(idx) == 0:
		f.hub.healAll()
	default:
		return errors.New("heal takes at most two guests")
	}
	return nil
}

// partitionPorts carries out "partition_ports a b port...".
func (f *fleet) partitionPorts(args []string) error {
	if f.hub == nil {
		return errors.New("a single guest has no network")
	}
	if len(args) < 3 {
		return errors.New("partition_ports needs two guests and a port")
	}
	i, err := f.index(args[0])
	if err != nil {
		return err
	}
	j, err := f.index(args[1])
	if err != nil {
		return err
	}
	if i == j {
		return fmt.Errorf("cannot partition guest %s from itself", args[0])
	}
	var ports []uint16
	for _, a := range args[2:] {
		p, err := strconv.ParseUint(a, 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("bad port %q", a)
		}
		ports = append(ports, uint16(p))
	}
	f.hub.setCut(i, j, true, ports...)
	return nil
}

// isolate carries out "isolate a".
func (f *fleet) isolate(names []string) error {
	if f.hub == nil {
		return errors.New("a single guest has no network")
	}
	if len(names) != 1 {
		return errors.New("isolate needs one guest")
	}
	i, err := f.index(names[0])
	if err != nil {
		return err
	}
	f.setCutAll(i, true)
	return nil
}

func (f *fleet) setCutAll(i int, on bool) {
	for j := range f.guests {
		if j != i {
			f.hub.setCut(i, j, on)
		}
	}
}
