package cluster

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestHostKeyAtRegistration: a node makes its DH-HMAC-CHAP secret once
// (a 0600 file in its cluster directory), publishes it in etcd when it
// registers, keeps it across restarts, puts it back at Refresh when it
// is gone from etcd, never logs it, and takes it away when it leaves.
func TestHostKeyAtRegistration(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1 := newNode(t, "n1", &c)
	n1.o.Members = 1 // n2 joins as a client: its leave needs no membership change
	var logs bytes.Buffer
	n1.o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if _, ok := n1.HostSecret(); ok {
		t.Error("a host secret before registration")
	}
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	sec, ok := n1.HostSecret()
	if !ok {
		t.Fatal("no host secret after init")
	}
	path := filepath.Join(n1.o.Dir, HostKeyFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want 0600", path, err, fi.Mode().Perm())
	}
	file, err := nvmf.LoadSecret(path)
	if err != nil || file.Reveal() != sec.Reveal() {
		t.Fatalf("file and HostSecret differ (%v)", err)
	}
	m, err := volumes.HostKeys(ctx, n1.cli)
	if err != nil || len(m) != 1 || m["n1"].Reveal() != sec.Reveal() {
		t.Fatalf("etcd host keys: %d, n1 matches %v, %v", len(m), m["n1"].Reveal() == sec.Reveal(), err)
	}
	// The controller secret (bidirectional authentication): its own
	// 0600 file, in the same etcd record, different from the host secret.
	ctrl, ok := n1.CtrlSecret()
	if !ok || ctrl.Reveal() == sec.Reveal() {
		t.Fatalf("controller secret after init: %v, equals the host secret: %v", ok, ctrl.Reveal() == sec.Reveal())
	}
	cpath := filepath.Join(n1.o.Dir, CtrlKeyFile)
	if fi, err := os.Stat(cpath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v; want 0600", cpath, err)
	}
	if file, err := nvmf.LoadSecret(cpath); err != nil || file.Reveal() != ctrl.Reveal() {
		t.Fatalf("controller key file and CtrlSecret differ (%v)", err)
	}
	if _, cm, err := volumes.AllNodeKeys(ctx, n1.cli); err != nil || cm["n1"].Reveal() != ctrl.Reveal() {
		t.Fatalf("etcd controller key of n1 matches: %v, %v", cm["n1"].Reveal() == ctrl.Reveal(), err)
	}
	r1, _ := n1.cli.Get(ctx, keys.HostKey("n1"))

	// Restart: the same secret, not written again.
	n1.Close()
	if err := n1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := n1.HostSecret(); s.Reveal() != sec.Reveal() {
		t.Error("restart made a new secret")
	}
	if s, _ := n1.CtrlSecret(); s.Reveal() != ctrl.Reveal() {
		t.Error("restart made a new controller secret")
	}
	if r2, _ := n1.cli.Get(ctx, keys.HostKey("n1")); r2.Kvs[0].ModRevision != r1.Kvs[0].ModRevision {
		t.Error("restart rewrote an unchanged host key")
	}
	// Gone from etcd: the next refresh puts it back.
	if _, err := n1.cli.Delete(ctx, keys.HostKey("n1")); err != nil {
		t.Fatal(err)
	}
	if err := n1.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ := volumes.HostKeys(ctx, n1.cli); m["n1"].Reveal() != sec.Reveal() {
		t.Error("refresh did not restore the host key")
	}
	if strings.Contains(logs.String(), sec.Reveal()[10:40]) || strings.Contains(logs.String(), ctrl.Reveal()[10:40]) {
		t.Error("the log contains the host or controller secret")
	}
	if out := fmt.Sprintf("%v %+v %#v %s", ctrl, ctrl, ctrl, ctrl); strings.Contains(out, ctrl.Reveal()[10:40]) {
		t.Errorf("CtrlSecret prints the key: %s", out)
	}

	// A second node's key is removed with it.
	n2 := newNode(t, "n2", &c)
	if err := n2.Join(ctx, joinAddr(n1), mustToken(t, n1, 3600e9)); err != nil {
		t.Fatal(err)
	}
	if m, _ := volumes.HostKeys(ctx, n1.cli); len(m) != 2 || m["n2"] == m["n1"] || m["n2"] == "" {
		t.Fatalf("after join: %d host keys, want 2 distinct", len(m))
	}
	if err := n2.Leave(ctx, false); err != nil {
		t.Fatal(err)
	}
	if m, _ := volumes.HostKeys(ctx, n1.cli); len(m) != 1 {
		t.Errorf("after leave: %d host keys, want 1", len(m))
	}
}
