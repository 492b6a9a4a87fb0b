package exporter

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// TestDesireTLS: with Input.TLS the drive ports take TLS (required, or
// optional: addr_treq "not required"), and Desired.Keys holds each
// export's pair key, the one the owner derives from its own secret
// (fabrictls.PairKey); an owner without a secret gets nothing; a target
// without TLS exports nothing rather than plain ports; the ports' TLS
// survives the backend's conversions (a plugin sees it, List returns it).
func TestDesireTLS(t *testing.T) {
	tlsAuth := nvmet.Features{Auth: true, TLS: true}
	for _, ports := range []string{fabrictls.PortsRequired, fabrictls.PortsOptional} {
		in := base()
		in.TLS = ports
		d := Desire(in, tlsAuth)
		if d.Refused != nil || len(d.Problems) > 0 || len(d.Exports) != 2 || len(d.Spec.Ports) != 1 {
			t.Fatalf("%s: refused %v problems %v exports %v ports %v", ports, d.Refused, d.Problems, d.Exports, d.Spec.Ports)
		}
		p := d.Spec.Ports[0]
		if !p.TLS || p.TLSOptional != (ports == fabrictls.PortsOptional) {
			t.Errorf("%s: port TLS %v optional %v", ports, p.TLS, p.TLSOptional)
		}
		if len(d.Keys) != 2 {
			t.Fatalf("%s: %d keys, want 2", ports, len(d.Keys))
		}
		for i, e := range d.Exports {
			want, err := fabrictls.PairKey(nvmf.SecretText(keyB), hostB, e.NQN)
			if err != nil {
				t.Fatal(err)
			}
			if !e.TLS || d.Keys[i].Identity != want.Identity || !bytes.Equal(d.Keys[i].Key, want.Key) {
				t.Errorf("%s: export %s TLS %v key %v, want the owner's pair key %v", ports, e.NQN, e.TLS, d.Keys[i], want)
			}
		}
		st := pnvmet.StateOf(pnvmet.FromSpec(d.Spec))
		if len(st.Ports) != 1 || st.Ports[0].TLS != p.TLS || st.Ports[0].TLSOptional != p.TLSOptional {
			t.Errorf("%s: through the backend's exports: %+v", ports, st.Ports)
		}
		if err := checkTLS(d.Spec, st); err != nil {
			t.Errorf("%s: %v", ports, err)
		}
		plain := st
		plain.Ports = []nvmet.Port{st.Ports[0]}
		plain.Ports[0].TLS, plain.Ports[0].TLSOptional = false, false
		if err := checkTLS(d.Spec, plain); err == nil {
			t.Errorf("%s: a plain port passes the read-back check", ports)
		}
	}

	in := base()
	in.TLS = fabrictls.PortsRequired
	in.Volumes[0].Owner.Secret = ""
	in.AllowNoAuth = true
	if d := Desire(in, tlsAuth); len(d.Exports) != 0 || len(d.Problems) != 2 || !strings.Contains(d.Problems[0].Error(), "no DH-HMAC-CHAP secret to derive") {
		t.Errorf("owner without a secret: exports %v problems %v", d.Exports, d.Problems)
	}

	in = base()
	in.TLS = fabrictls.PortsOptional
	if d := Desire(in, auth); !errors.Is(d.Refused, ErrNoTLS) || len(d.Spec.Ports) != 0 || len(d.Keys) != 0 {
		t.Errorf("target without TLS: refused %v, ports %v", d.Refused, d.Spec.Ports)
	}
	if d := Desire(base(), tlsAuth); len(d.Keys) != 0 || d.Spec.Ports[0].TLS {
		t.Errorf("no TLS asked for: keys %v ports %+v", d.Keys, d.Spec.Ports)
	}
}

// memKeys is a keyring in memory: identity to key.
type memKeys map[string][]byte

func (k memKeys) Insert(d nvmetls.Derived) error { k[d.Identity] = d.Key; return nil }

func (k memKeys) Identities() ([]string, error) { return slices.Sorted(maps.Keys(k)), nil }

func (k memKeys) Remove(id string) error { delete(k, id); return nil }

// tlsTarget is a memTarget whose ports take TLS.
type tlsTarget struct{ *memTarget }

func (t tlsTarget) Features(ctx context.Context) (backend.Features, error) {
	f, err := t.memTarget.Features(ctx)
	f.TLS = true
	return f, err
}

// TestReconcilePrunesKeys: Reconcile leaves in the keyring the pair keys
// of this pass's TLS exports and removes those of drive exports it no
// longer makes (a drive or owner gone, TLS turned off), and nothing else:
// not this node's own importer keys (its host NQN), not other
// subsystems' keys, not descriptions of another shape.
func TestReconcilePrunesKeys(t *testing.T) {
	ks := memKeys{}
	stale, err := fabrictls.PairKey(nvmf.SecretText(keyC), hostC, NQN("d9"))
	if err != nil {
		t.Fatal(err)
	}
	importer, err := fabrictls.PairKey(nvmf.SecretText(keyB), hostA, NQN("r1"))
	if err != nil {
		t.Fatal(err)
	}
	others := []string{importer.Identity, nvmetls.Identity(nvmetls.SHA256, hostB, "nqn.2014-08.org.example:other"), "not a psk identity"}
	for _, id := range append(others, stale.Identity) {
		ks[id] = []byte("k")
	}
	x := &Exporter{Target: tlsTarget{&memTarget{}}, Keys: ks}
	in := base()
	in.TLS = fabrictls.PortsRequired
	res, err := x.Reconcile(context.Background(), in)
	if err != nil || len(res.Exports) != 2 {
		t.Fatalf("reconcile: %v, exports %v", err, res.Exports)
	}
	var want []string
	for _, e := range res.Exports {
		k, err := fabrictls.PairKey(nvmf.SecretText(keyB), hostB, e.NQN)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, k.Identity)
	}
	want = append(want, others...)
	if got, _ := ks.Identities(); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("keys after the TLS reconcile: %q, want %q", got, slices.Sorted(slices.Values(want)))
	}

	in.Volumes = nil
	if _, err := x.Reconcile(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if got, _ := ks.Identities(); !slices.Equal(got, slices.Sorted(slices.Values(others))) {
		t.Errorf("keys after the exports are gone: %q, want %q", got, slices.Sorted(slices.Values(others)))
	}
}
