package importer

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

type recordKeys []nvmetls.Derived

func (r *recordKeys) Insert(d nvmetls.Derived) error { *r = append(*r, d); return nil }

func (r *recordKeys) Identities() ([]string, error) {
	var ids []string
	for _, d := range *r {
		ids = append(ids, d.Identity)
	}
	return ids, nil
}

func (r *recordKeys) Remove(id string) error {
	*r = slices.DeleteFunc(*r, func(d nvmetls.Derived) bool { return d.Identity == id })
	return nil
}

// TestReconcileTLSKeys: before a TLS connect the importer inserts the
// pair key derived from its own secret (the key the exporter derives
// from the same secret); a remote the caller refused (Remote.Refused) is
// not connected and the problem says why. The connect itself fails here
// (no kernel behind the fabrics file).
func TestReconcileTLSKeys(t *testing.T) {
	dir := t.TempDir()
	fabrics := filepath.Join(dir, "nvme-fabrics")
	if err := os.WriteFile(fabrics, []byte("transport=%s,traddr=%s,tls,dhchap_secret=%s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var keys recordKeys
	im := &Importer{Host: &nvmf.Host{Fabrics: fabrics, Dev: dir, Sysfs: nvmf.Sysfs{Root: t.TempDir()}}, Keys: &keys}
	secret := nvmf.SecretText(nvmf.Secret{Key: bytes.Repeat([]byte{0xb0}, 32)}.Reveal())
	in := Input{Identity: id, Secret: secret, Remotes: []Remote{
		{NQN: exporter.NQN("d1"), Address: "10.0.0.2", TLS: true},
		{NQN: exporter.NQN("d2"), Address: "10.0.0.3", Refused: "NVMe/TCP TLS: nvme_tls = required here and the exporting node offers no TLS"},
	}}
	res, err := im.Reconcile(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fabrictls.PairKey(secret, id.NQN, exporter.NQN("d1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].Identity != want.Identity || !bytes.Equal(keys[0].Key, want.Key) {
		t.Fatalf("inserted %v, want only %v", keys, want)
	}
	var refused bool
	for _, p := range res.Problems {
		refused = refused || strings.Contains(p.Error(), "d2") && strings.Contains(p.Error(), "offers no TLS; not connecting")
	}
	if !refused {
		t.Fatalf("problems %v: want d2 refused with the TLS reason", res.Problems)
	}
	if b, _ := os.ReadFile(fabrics); strings.Contains(string(b), "d2") {
		t.Fatalf("a connect to the refused remote was written: %s", b)
	}
}
