package exporter

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
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
