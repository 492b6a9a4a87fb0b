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
	dir, fabrics := tlsFabrics(t)
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

// fakeController makes controller name in the sysfs tree root: live, of
// host to nqn at addr on the default service id.
func fakeController(t *testing.T, root, name, host, nqn, addr string) {
	t.Helper()
	dir := filepath.Join(root, "class", "nvme", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for a, v := range map[string]string{"transport": "tcp", "state": "live", "hostnqn": host, "subsysnqn": nqn,
		"address": "traddr=" + addr + ",trsvcid=" + exporter.DefaultServiceID} {
		if err := os.WriteFile(filepath.Join(dir, a), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReconcilePrunesKeys: after a Reconcile the keyring keeps this
// host's pair keys of the drives it still wants over TLS (connected or
// not, a KeepOnly remote too) and of the controllers it keeps (a refused
// remote's), and loses those of the TLS members it dropped; it never
// touches the drive exporter's keys (another host on a drive subsystem),
// other subsystems' keys or other descriptions.
func TestReconcilePrunesKeys(t *testing.T) {
	dir, fabrics := tlsFabrics(t)
	sysfs := t.TempDir()
	fakeController(t, sysfs, "nvme0", id.NQN, exporter.NQN("kept"), "10.0.0.4")
	hostC := "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0000-4000-8000-00000000000c"
	ours := func(drive string) string { return nvmetls.Identity(nvmetls.SHA256, id.NQN, exporter.NQN(drive)) }
	others := []string{
		nvmetls.Identity(nvmetls.SHA256, hostC, exporter.NQN("gone")), // the drive exporter's
		nvmetls.Identity(nvmetls.SHA256, id.NQN, "nqn.2014-08.org.example:other"),
		"not a psk identity",
	}
	var keys recordKeys
	for _, k := range append([]string{ours("gone"), ours("kept"), ours("later"), ours("dead")}, others...) {
		keys = append(keys, nvmetls.Derived{Identity: k})
	}
	im := &Importer{Host: &nvmf.Host{Fabrics: fabrics, Dev: dir, Sysfs: nvmf.Sysfs{Root: sysfs}}, Keys: &keys}
	in := Input{Identity: id, Secret: nvmf.SecretText(nvmf.Secret{Key: bytes.Repeat([]byte{0xb0}, 32)}.Reveal()), Remotes: []Remote{
		{NQN: exporter.NQN("later"), Address: "10.0.0.2", TLS: true}, // its connect fails here: still wanted
		{NQN: exporter.NQN("dead"), Address: "10.0.0.3", TLS: true, KeepOnly: true},
		{NQN: exporter.NQN("kept"), Address: "10.0.0.4", Refused: "NVMe/TCP TLS: this node cannot connect with it"},
	}}
	check := func(when string, want ...string) {
		t.Helper()
		got, _ := keys.Identities()
		got = slices.Compact(slices.Sorted(slices.Values(got)))
		want = slices.Sorted(slices.Values(append(want, others...)))
		if !slices.Equal(got, want) {
			t.Fatalf("keys %s: %q, want %q", when, got, want)
		}
	}
	if _, err := im.Reconcile(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	check("after dropping drive gone", ours("later"), ours("dead"), ours("kept"))

	in.Remotes = in.Remotes[1:]
	if _, err := im.Reconcile(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	check("after dropping drive later", ours("dead"), ours("kept"))
}

// TestReconcileRefreshesKeys: the pair key of a TLS member whose
// controller is already there is put into the keyring on every pass,
// derived from the secret of that pass: after a host key rotation the
// controller's next reconnect finds the key the targets now derive from
// the new secret, not the old one.
func TestReconcileRefreshesKeys(t *testing.T) {
	dir, fabrics := tlsFabrics(t)
	sysfs := t.TempDir()
	fakeController(t, sysfs, "nvme0", id.NQN, exporter.NQN("d1"), "10.0.0.2")
	var keys recordKeys
	im := &Importer{Host: &nvmf.Host{Fabrics: fabrics, Dev: dir, Sysfs: nvmf.Sysfs{Root: sysfs}}, Keys: &keys}
	for _, b := range []byte{0xb0, 0xb1} { // the secret before and after a rotation
		secret := nvmf.SecretText(nvmf.Secret{Key: bytes.Repeat([]byte{b}, 32)}.Reveal())
		in := Input{Identity: id, Secret: secret, Remotes: []Remote{{NQN: exporter.NQN("d1"), Address: "10.0.0.2", TLS: true}}}
		if _, err := im.Reconcile(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		want, err := fabrictls.PairKey(secret, id.NQN, exporter.NQN("d1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 || !bytes.Equal(keys[len(keys)-1].Key, want.Key) || keys[len(keys)-1].Identity != want.Identity {
			t.Fatalf("secret %x: keys inserted %v, want the pair key of this secret last", b, keys)
		}
		if w, _ := os.ReadFile(fabrics); strings.Contains(string(w), "d1") {
			t.Fatalf("the kept controller's member was connected again: %s", w)
		}
	}
}

// tlsFabrics is a directory with a fabrics file that lists the tls option
// (a connect written to it fails: no kernel behind it).
func tlsFabrics(t *testing.T) (dir, fabrics string) {
	t.Helper()
	dir = t.TempDir()
	fabrics = filepath.Join(dir, "nvme-fabrics")
	if err := os.WriteFile(fabrics, []byte("transport=%s,traddr=%s,tls,dhchap_secret=%s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, fabrics
}
