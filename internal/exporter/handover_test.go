package exporter

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// allowed maps each export of exports to its allowed host NQNs.
func allowed(m *memTarget) map[string][]string {
	out := map[string][]string{}
	for _, e := range m.exports {
		for _, h := range e.Hosts {
			out[e.NQN] = append(out[e.NQN], h.NQN)
		}
		slices.Sort(out[e.NQN])
	}
	return out
}

// TestDesirePrepared: while B holds v1's key and C is the planned move's
// target, v1's drives here allow B and C, each host entry with its own
// secret; a volume this node holds (A) is exported to its target alone.
func TestDesirePrepared(t *testing.T) {
	in := base()
	in.Volumes[0].Prepared = Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}
	in.Volumes = append(in.Volumes, Volume{UUID: "v2", Owner: Host{NQN: hostA}, Prepared: Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}, Members: []string{"d3"}})
	m := &memTarget{}
	if _, err := (&Exporter{Target: m}).Reconcile(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{NQN("d1"): {hostB, hostC}, NQN("d2"): {hostB, hostC}, NQN("d3"): {hostC}}
	if got := allowed(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("allowed hosts %v, want %v", got, want)
	}
	if got := listened(m.exports); !reflect.DeepEqual(got, []string{"d1", "d2", "d3"}) {
		t.Errorf("linked %v, want d1 d2 d3", got)
	}
	d := desireHandover(in, auth)
	keys := map[string]string{}
	for _, h := range d.Spec.Hosts {
		keys[h.NQN] = h.DHCHAPKey
	}
	if keys[hostB] != keyB || keys[hostC] != keyC || len(keys) != 2 {
		t.Errorf("host entries: B's key right %v, C's key right %v, %d entries; want B and C with their own secrets",
			keys[hostB] == keyB, keys[hostC] == keyC, len(keys))
	}
	// With TLS the prepared host's pair keys are there too.
	in.TLS = fabrictls.PortsRequired
	if d := desireHandover(in, nvmet.Features{Auth: true, TLS: true}); len(d.Keys) != 5 || d.Refused != nil {
		t.Errorf("TLS: %d pair keys (refused %v), want 5 (d1, d2 for B and C; d3 for C)", len(d.Keys), d.Refused)
	}
	// Without a prepared host the desired state is Desire's.
	in = base()
	if got, want := desireHandover(in, auth), Desire(in, auth); !reflect.DeepEqual(got, want) {
		t.Errorf("no prepared host:\n got  %+v\n want %+v", got.Spec, want.Spec)
	}
}

// TestReleasedNotFenced: C, the prepared target, acquires v1's key; B,
// the old holder, released its imports. The drives drop B from their
// allowed hosts without a fence step (C's controllers stay). Without the
// release, or with another host to remove, they are fenced as before.
func TestReleasedNotFenced(t *testing.T) {
	prepared := base()
	prepared.Volumes[0].Prepared = Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}
	moved := base()
	moved.Volumes[0].Owner, moved.Volumes[0].Epoch = Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}, 20
	for _, c := range []struct {
		name     string
		released string
		fenced   []string
	}{
		{"B released", hostB, nil},
		{"no release", "", []string{"d1", "d2"}},
		{"another host released", hostA, []string{"d1", "d2"}},
	} {
		m := &memTarget{exports: pnvmet.FromSpec(desireHandover(prepared, auth).Spec)}
		in := moved
		in.Volumes = slices.Clone(moved.Volumes)
		in.Volumes[0].Released = c.released
		res, err := (&Exporter{Target: m}).Reconcile(context.Background(), in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(res.Fenced, c.fenced) {
			t.Errorf("%s: fenced %v, want %v", c.name, res.Fenced, c.fenced)
		}
		if want := map[string][]string{NQN("d1"): {hostC}, NQN("d2"): {hostC}}; !reflect.DeepEqual(allowed(m), want) {
			t.Errorf("%s: allowed hosts %v, want %v", c.name, allowed(m), want)
		}
		if c.fenced == nil && len(m.applied) != 1 {
			t.Errorf("%s: %d applies, want the desired state alone", c.name, len(m.applied))
		}
	}
}
