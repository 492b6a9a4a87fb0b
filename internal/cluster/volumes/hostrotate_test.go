package volumes

import (
	"bytes"
	"reflect"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestHostKeyAcks (real etcd): a pending host key is published beside
// the one in force; acknowledgements count only for that pending key,
// from the nodes asked about; they go with DeleteHostKeyAcks.
func TestHostKeyAcks(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	secret := func(b byte) string { return nvmf.Secret{Key: bytes.Repeat([]byte{b}, 32)}.Reveal() }
	old, ctrl, next, other := secret(1), secret(2), secret(3), secret(4)
	k, err := EnsureNodeKeys(ctx, cli, "a", func() (NodeKeys, error) { return NodeKeys{Host: old, Ctrl: ctrl, Pending: next}, nil })
	if err != nil || k.Pending != next {
		t.Fatalf("EnsureNodeKeys with a pending key: %v", err)
	}
	recs, err := HostKeyRecords(ctx, cli)
	if err != nil || recs["a"].Secret != old || recs["a"].PendingSecret != next {
		t.Fatalf("record of a: in force is the old key %v, pending the new %v (%v)", recs["a"].Secret == old, recs["a"].PendingSecret == next, err)
	}
	if _, err := EnsureNodeKeys(ctx, cli, "a", func() (NodeKeys, error) { return NodeKeys{Host: old, Ctrl: ctrl, Pending: ctrl}, nil }); err == nil {
		t.Error("a pending host key equal to the controller key was published")
	}
	missing := func(want ...string) {
		t.Helper()
		got, err := MissingHostKeyAcks(ctx, cli, "a", next, []string{"c", "b", "d"})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("missing acknowledgements %v (%v), want %v", got, err, want)
		}
	}
	missing("b", "c", "d")
	for _, by := range []string{"b", "c"} {
		if err := AckHostKey(ctx, cli, "a", by, next); err != nil {
			t.Fatal(err)
		}
	}
	if err := AckHostKey(ctx, cli, "a", "d", other); err != nil { // an earlier rotation's key
		t.Fatal(err)
	}
	if err := AckHostKey(ctx, cli, "e", "d", next); err != nil { // another node's rotation
		t.Fatal(err)
	}
	missing("d")
	rev := func() int64 {
		r, err := cli.Get(ctx, keys.HostKeyAck("a", "b"))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("ack of b: %v", err)
		}
		return r.Kvs[0].ModRevision
	}
	before := rev()
	if err := AckHostKey(ctx, cli, "a", "b", next); err != nil || rev() != before {
		t.Errorf("a repeated acknowledgement was written again (%v)", err)
	}
	if err := AckHostKey(ctx, cli, "a", "d", next); err != nil {
		t.Fatal(err)
	}
	missing()
	if err := DeleteHostKeyAcks(ctx, cli, "a"); err != nil {
		t.Fatal(err)
	}
	missing("b", "c", "d")
	if r, err := cli.Get(ctx, keys.HostKeyAcks("e"), clientv3.WithPrefix()); err != nil || len(r.Kvs) != 1 {
		t.Errorf("another node's acknowledgements went too (%v)", err)
	}
	if HostKeyFingerprint(next) == HostKeyFingerprint(other) || len(HostKeyFingerprint(next)) != 32 {
		t.Error("fingerprints")
	}
}
