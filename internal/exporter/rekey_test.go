package exporter

import (
	"bytes"
	"context"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmf"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// keyN is a third secret: the new key of a rotation of hostB's keyB.
var keyN = nvmf.Secret{Key: bytes.Repeat([]byte{0xe}, 32)}.Reveal()

// TestKeyChangeFences: when a host entry's key change ends its host's
// controllers.
func TestKeyChangeFences(t *testing.T) {
	r := Rekey{Old: nvmf.SecretText(keyB), New: nvmf.SecretText(keyN)}
	for _, c := range []struct {
		name       string
		have, want string
		r          Rekey
		announced  bool
		fence      bool
	}{
		{"unchanged", keyB, keyB, Rekey{}, false, false},
		{"unchanged during a rotation", keyB, keyB, r, true, false},
		{"unannounced change", keyB, keyC, Rekey{}, false, true},
		{"announced rotation", keyB, keyN, r, true, false},
		{"rotation done on this target", keyN, keyN, r, true, false},
		{"change to another key than the announced one", keyB, keyC, r, true, true},
		{"change from another key than the announced old", keyC, keyN, r, true, true},
		{"back from the new key to the old", keyN, keyB, r, true, true},
		{"a first key (no entry before)", "", keyN, r, true, true},
	} {
		if got := KeyChangeFences(c.have, c.want, c.r, c.announced); got != c.fence {
			t.Errorf("%s: KeyChangeFences = %v, want %v", c.name, got, c.fence)
		}
	}
}

// TestReconcileRekey: the exporter replaces a volume owner's host key in
// place, without a fence, when the rotation from the target's key to the
// new one is announced (Input.Rekeys); the same change unannounced, or
// announced from another old key, fences the owner's drives.
func TestReconcileRekey(t *testing.T) {
	old := Desire(base(), auth).Spec
	for _, c := range []struct {
		name   string
		rekeys Rekeys
		fenced int
	}{
		{"announced", Rekeys{hostB: {Old: nvmf.SecretText(keyB), New: nvmf.SecretText(keyN)}}, 0},
		{"unannounced", nil, 2},
		{"announced from another key", Rekeys{hostB: {Old: nvmf.SecretText(keyC), New: nvmf.SecretText(keyN)}}, 2},
		{"another host's rotation", Rekeys{hostC: {Old: nvmf.SecretText(keyB), New: nvmf.SecretText(keyN)}}, 2},
	} {
		in := base()
		in.Volumes[0].Owner.Secret = nvmf.SecretText(keyN)
		in.Rekeys = c.rekeys
		m := &memTarget{exports: pnvmet.FromSpec(old)}
		res, err := (&Exporter{Target: m}).Reconcile(context.Background(), in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(res.Fenced) != c.fenced {
			t.Errorf("%s: fenced %v, want %d drives", c.name, res.Fenced, c.fenced)
		}
		for _, e := range m.exports {
			for _, h := range e.Hosts {
				if h.NQN == hostB && string(h.DHCHAPKey) != keyN {
					t.Errorf("%s: %s: host B's key is not the new one", c.name, e.NQN)
				}
			}
		}
	}
}
