package owner

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// AcquireIf writes the key only while its conditions hold: a false one
// leaves the volume free (ErrConditions), a held key is still a
// *HeldError.
func TestAcquireIf(t *testing.T) {
	addr := startEtcd(t)
	ctx := ctxT(t)
	cli := client(t, addr)
	s, err := NewSession(ctx, cli, Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const vol, other = "0d7f3a52-6b1e-4c1a-9a57-3c4f8c2b9e02", "/fabraid-test/acquireif"
	put, err := cli.Put(ctx, other, "1")
	if err != nil {
		t.Fatal(err)
	}
	stale := clientv3.Compare(clientv3.ModRevision(other), "=", put.Header.Revision-1)
	if _, err := AcquireIf(ctx, s, vol, "a", stale); !errors.Is(err, ErrConditions) {
		t.Fatalf("acquire with a false condition: %v, want ErrConditions", err)
	}
	if _, _, ok, err := Current(ctx, cli, vol); ok || err != nil {
		t.Fatalf("after a refused acquire: owned %v, err %v", ok, err)
	}
	cur := clientv3.Compare(clientv3.ModRevision(other), "=", put.Header.Revision)
	e, err := AcquireIf(ctx, s, vol, "a", cur)
	if err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := AcquireIf(ctx, s, vol, "a", stale); !errors.As(err, &held) || held.Epoch != e {
		t.Fatalf("acquire of a held volume with a false condition: %v, want the holder", err)
	}
}
