package volmgr

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

const (
	hostA = "nqn.2014-08.org.nvmexpress:uuid:0a0a0a0a-0000-4000-8000-00000000000a"
	hostB = "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b"
	hostC = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0000-4000-8000-00000000000c"
)

type memKeys map[string][]byte

func (k memKeys) Insert(d nvmetls.Derived) error { k[d.Identity] = d.Key; return nil }

func (k memKeys) Identities() ([]string, error) { return slices.Sorted(maps.Keys(k)), nil }

func (k memKeys) Remove(id string) error { delete(k, id); return nil }

func pairKey(t *testing.T, secret nvmf.SecretText, host, sub string) nvmetls.Derived {
	t.Helper()
	k, err := fabrictls.PairKey(secret, host, sub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestReconcileClusterTLS: the volume ports take TLS as the plan says
// (required: TLS only; on: TLS or plain; off: plain), the pair key of
// each allowed host with a secret is in the keyring (none for a host
// without one, none under an attach list that leaves the host out), and
// after the pass the volume keys it no longer needs are gone while the
// drive paths' keys and other descriptions stay.
func TestReconcileClusterTLS(t *testing.T) {
	ctx := context.Background()
	u, gone := [16]byte{1}, [16]byte{2}
	const secA, secB = nvmf.SecretText("DHHC-1:00:a:"), nvmf.SecretText("DHHC-1:00:b:")
	hosts := []ExportHost{{NQN: hostA, Secret: secA}, {NQN: hostB, Secret: secB}, {NQN: hostC}}
	ks := memKeys{}
	stale := pairKey(t, secB, hostB, volid.NQN(gone))
	drive := pairKey(t, secB, hostB, "nqn.2026-11.io.fabraid:drive:a-disk0")
	for _, k := range []nvmetls.Derived{stale, drive} {
		ks.Insert(k)
	}
	ks["not an identity"] = nil
	b := &anaBackend{}
	x := &exporter{target: b, sysfs: nvmf.Sysfs{Root: t.TempDir()}, id: nvmf.HostIdentity{NQN: hostA}, keys: ks}
	exports := []Export{{UUID: u, Device: "/dev/ublkb0"}}
	for _, tc := range []struct {
		ports         string
		attached      []string
		tls, optional bool
		keyed         []string // hosts with a pair key of u after the pass
	}{
		{fabrictls.PortsRequired, nil, true, false, []string{hostA, hostB}},
		{fabrictls.PortsOptional, nil, true, true, []string{hostA, hostB}},
		{fabrictls.PortsRequired, []string{hostA, hostC}, true, false, []string{hostA}},
		{fabrictls.PortsPlain, nil, false, false, nil},
	} {
		p := &ClusterPlan{Hosts: hosts, Addresses: []string{"10.0.0.1", "10.0.1.1"}, TLS: tc.ports, Attached: map[[16]byte][]string{}}
		if tc.attached != nil {
			p.Attached[u] = tc.attached
		}
		if _, err := x.reconcileCluster(ctx, slices.Clone(exports), p); err != nil || len(b.exports) != 1 {
			t.Fatalf("ports %q: %v, exports %+v", tc.ports, err, b.exports)
		}
		for _, l := range b.exports[0].Listeners {
			if l.TLS != tc.tls || l.TLSOptional != tc.optional {
				t.Errorf("ports %q: listener %s TLS %v optional %v, want %v %v", tc.ports, l.Address, l.TLS, l.TLSOptional, tc.tls, tc.optional)
			}
		}
		for _, h := range hosts {
			want := pairKey(t, h.Secret+"x", h.NQN, volid.NQN(u)) // identity only
			k, there := ks[want.Identity]
			if there != slices.Contains(tc.keyed, h.NQN) {
				t.Errorf("ports %q, attached %q: key of %s there %v, want hosts %q", tc.ports, tc.attached, h.NQN, there, tc.keyed)
			}
			if there && !bytes.Equal(k, pairKey(t, h.Secret, h.NQN, volid.NQN(u)).Key) {
				t.Errorf("key of %s is not its pair key", h.NQN)
			}
		}
		if _, there := ks[stale.Identity]; there {
			t.Errorf("ports %q: the key of a volume no longer exported stays", tc.ports)
		}
		if _, there := ks[drive.Identity]; !there {
			t.Fatalf("ports %q: a drive path's key was removed", tc.ports)
		}
		if _, there := ks["not an identity"]; !there {
			t.Fatalf("ports %q: another description was removed", tc.ports)
		}
	}
}

// TestConsumerTLS: a consumer connects with TLS as decided and derives
// the key the owner's export holds for its host; a refused consumer gets
// no connection, and its existing controllers are not disconnected
// (keepControllers) while other unwanted ones are.
func TestConsumerTLS(t *testing.T) {
	const secret = nvmf.SecretText("DHHC-1:00:b:")
	id := nvmf.HostIdentity{NQN: hostB, ID: "0b0b0b0b-0000-4000-8000-00000000000b"}
	u, plain, refused := [16]byte{1}, [16]byte{2}, [16]byte{3}
	cs := []Consumer{
		{UUID: u, Addresses: []string{"10.0.0.1", "10.0.1.1"}, TLS: true},
		{UUID: plain, Addresses: []string{"10.0.0.2"}},
		{UUID: refused, Addresses: []string{"10.0.0.3"}, Refused: "NVMe/TCP TLS: nvme_tls = required here and the exporting node offers no TLS"},
	}
	desired, err := ConsumerConnections(cs, id, secret)
	if err != nil || len(desired) != 3 || !desired[0].TLS || !desired[1].TLS || desired[2].TLS || desired[2].NQN != volid.NQN(plain) {
		t.Fatalf("connections %+v, %v: want u twice with TLS, plain once without, none to the refused", desired, err)
	}
	mine, err := ConsumerKeys(desired, secret)
	if err != nil || len(mine) != 2 {
		t.Fatalf("consumer keys: %d, %v", len(mine), err)
	}
	spec := WithTLS(ClusterExportSpec([]Export{{UUID: u, Device: "/dev/ublkb0"}}, []ExportHost{{NQN: id.NQN, Secret: secret}}, true, []string{"10.0.0.1"}, 0), fabrictls.PortsRequired)
	theirs, err := ExportKeys(spec, []ExportHost{{NQN: id.NQN, Secret: secret}}, fabrictls.PortsRequired)
	if err != nil || len(theirs) != 1 || theirs[0].Identity != mine[0].Identity || !bytes.Equal(theirs[0].Key, mine[0].Key) {
		t.Fatalf("the owner's export key and the consumer's differ (%v)", err)
	}
	ctrls := []nvmf.Controller{{Name: "nvme1", SubsystemNQN: volid.NQN(refused)}, {Name: "nvme2", SubsystemNQN: volid.NQN([16]byte{4})}}
	plan := nvmf.PlanConnections(desired, ctrls, volid.NQNPrefix)
	if got := keepControllers(plan.Disconnect, ctrls, refusedNQNs(cs)); !slices.Equal(got, []string{"nvme2"}) {
		t.Errorf("disconnect %q, want only nvme2 (the refused volume's controller kept)", got)
	}
}
