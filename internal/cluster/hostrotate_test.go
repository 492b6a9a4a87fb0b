package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestRotateHostSecret (real etcd): a host key rotation keeps the node
// presenting its old secret (HostSecret, dhchap.key, etcd's secret) and
// publishes the new one as pending, also across a refresh and a restart,
// and a second call keeps the same pending key; PromoteHostSecret makes
// the new one the secret in force everywhere, removes the old file and
// the acknowledgements; nothing is logged.
func TestRotateHostSecret(t *testing.T) {
	ctx := ctxT(t)
	n1, logs := loggedNode(t, "n1")
	if _, err := n1.RotateHostSecret(ctx); err == nil {
		t.Error("rotated before registration")
	}
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	old, _ := n1.HostSecret()
	ctrl, _ := n1.CtrlSecret()
	record := func() (secret, pending string) {
		t.Helper()
		recs, err := volumes.HostKeyRecords(ctx, n1.cli)
		if err != nil {
			t.Fatal(err)
		}
		return recs["n1"].Secret, recs["n1"].PendingSecret
	}
	if fresh, err := n1.RotateHostSecret(ctx); err != nil || !fresh {
		t.Fatalf("rotate: new key %v, %v", fresh, err)
	}
	next, ok := n1.HostPending()
	check := func(when string) {
		t.Helper()
		cur, _ := n1.HostSecret()
		sec, pend := record()
		f, err := nvmf.LoadSecret(filepath.Join(n1.o.Dir, HostKeyFile))
		if cur.Reveal() != old.Reveal() || sec != old.Reveal() || err != nil || f.Reveal() != old.Reveal() {
			t.Fatalf("%s: the old secret is not the one in force (HostSecret %v, etcd %v, file %v %v)", when,
				cur.Reveal() == old.Reveal(), sec == old.Reveal(), f.Reveal() == old.Reveal(), err)
		}
		if p, ok := n1.HostPending(); !ok || p.Reveal() != next.Reveal() || pend != next.Reveal() {
			t.Fatalf("%s: pending %v, the same %v, in etcd %v", when, ok, p.Reveal() == next.Reveal(), pend == next.Reveal())
		}
	}
	if !ok || next.Reveal() == old.Reveal() || next.Reveal() == ctrl.Reveal() {
		t.Fatalf("pending %v, differs from the old and the controller secret %v", ok, next.Reveal() != old.Reveal() && next.Reveal() != ctrl.Reveal())
	}
	check("announced")
	if err := n1.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a refresh")
	if fresh, err := n1.RotateHostSecret(ctx); err != nil || fresh {
		t.Fatalf("a second rotate while one is pending: new key %v, %v", fresh, err)
	}
	check("rotate again")
	n1.Close()
	if err := n1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a restart")
	if err := volumes.AckHostKey(ctx, n1.cli, "n1", "n2", next.Reveal()); err != nil {
		t.Fatal(err)
	}
	if err := n1.PromoteHostSecret(ctx); err != nil {
		t.Fatal(err)
	}
	cur, _ := n1.HostSecret()
	sec, pend := record()
	f, err := nvmf.LoadSecret(filepath.Join(n1.o.Dir, HostKeyFile))
	if cur.Reveal() != next.Reveal() || sec != next.Reveal() || pend != "" || err != nil || f.Reveal() != next.Reveal() {
		t.Fatalf("promoted: HostSecret %v, etcd %v, no pending %v, file %v %v", cur.Reveal() == next.Reveal(), sec == next.Reveal(), pend == "", f.Reveal() == next.Reveal(), err)
	}
	if _, ok := n1.HostPending(); ok {
		t.Error("still pending after the promotion")
	}
	if _, err := os.Stat(filepath.Join(n1.o.Dir, PendingHostKeyFile)); !os.IsNotExist(err) {
		t.Errorf("%s after the promotion: %v", PendingHostKeyFile, err)
	}
	if r, err := n1.cli.Get(ctx, keys.HostKeyAck("n1", "n2")); err != nil || len(r.Kvs) != 0 {
		t.Errorf("acknowledgements left after the promotion (%v)", err)
	}
	if c, _ := n1.CtrlSecret(); c.Reveal() != ctrl.Reveal() {
		t.Error("the controller secret changed")
	}
	for _, k := range []string{old.Reveal(), next.Reveal()} {
		if strings.Contains(logs.String(), k[10:40]) {
			t.Error("the log contains a host secret")
		}
	}
}
