package cluster

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestRotateCtrlSecret: a rotation gives the node a new controller
// secret at once (CtrlSecret, its 0600 file) while etcd keeps the old one,
// also across a registry refresh, until PublishKeys (the daemon calls it
// once its target presents the new key); the host secret is unchanged; a
// restart keeps the new key; nothing is logged.
func TestRotateCtrlSecret(t *testing.T) {
	ctx := ctxT(t)
	n1, logs := loggedNode(t, "n1")
	if err := n1.RotateCtrlSecret(); err == nil {
		t.Error("rotated before registration")
	}
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	host, _ := n1.HostSecret()
	old, _ := n1.CtrlSecret()
	etcdCtrl := func() string {
		t.Helper()
		_, cm, err := volumes.AllNodeKeys(ctx, n1.cli)
		if err != nil {
			t.Fatal(err)
		}
		return cm["n1"].Reveal()
	}
	if err := n1.RotateCtrlSecret(); err != nil {
		t.Fatal(err)
	}
	cur, _ := n1.CtrlSecret()
	if cur.Reveal() == old.Reveal() || !n1.CtrlPending() {
		t.Fatalf("after the rotation: new key %v, pending %v", cur.Reveal() != old.Reveal(), n1.CtrlPending())
	}
	if f, err := nvmf.LoadSecret(filepath.Join(n1.o.Dir, CtrlKeyFile)); err != nil || f.Reveal() != cur.Reveal() {
		t.Fatalf("the file does not hold the new key (%v)", err)
	}
	if err := n1.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if etcdCtrl() != old.Reveal() || !n1.CtrlPending() {
		t.Fatalf("before PublishKeys: etcd has the old key %v, pending %v", etcdCtrl() == old.Reveal(), n1.CtrlPending())
	}
	if err := n1.PublishKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if etcdCtrl() != cur.Reveal() || n1.CtrlPending() {
		t.Fatalf("after PublishKeys: etcd has the new key %v, pending %v", etcdCtrl() == cur.Reveal(), n1.CtrlPending())
	}
	if h, _ := n1.HostSecret(); h.Reveal() != host.Reveal() {
		t.Error("the host secret changed")
	}
	n1.Close()
	if err := n1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := n1.CtrlSecret(); s.Reveal() != cur.Reveal() || etcdCtrl() != cur.Reveal() {
		t.Error("a restart lost the rotated key")
	}
	for _, k := range []string{old.Reveal(), cur.Reveal()} {
		if strings.Contains(logs.String(), k[10:40]) {
			t.Error("the log contains a controller secret")
		}
	}
}

// loggedNode is a new node whose log, at debug level, goes to the
// returned buffer (the tests check that no secret is in it).
func loggedNode(t *testing.T, name string) (*Node, *bytes.Buffer) {
	var c clock
	n := newNode(t, name, &c)
	var logs bytes.Buffer
	n.o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return n, &logs
}
