package clusterplane

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// pinnedKV reads etcd as it was at revision rev: what a copy behind etcd
// answers (viewcache applies the watch's events in revision order).
type pinnedKV struct {
	clientv3.KV
	rev int64
}

func (k pinnedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return k.KV.Get(ctx, key, append(opts, clientv3.WithRev(k.rev))...)
}

// TestOwnershipStaleCopy: a's session ends, b takes v over; a, back with
// a new session, reads a copy from before the takeover (record owner a,
// no owner key) and so decides to acquire v. The acquisition is a
// compare-and-swap against etcd: it fails, a holds nothing, and b stays
// v's only owner.
func TestOwnershipStaleCopy(t *testing.T) {
	f := newOwnerFixture(t)
	a, b := f.node("a"), f.node("b")
	f.run(a)
	a.close(f.ctx)
	stale, err := f.cli.Get(f.ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	f.alive["a"] = false
	e2 := f.run(b).Held[f.uuid]
	if e2 == 0 || b.wrote.Load() != int64(e2) {
		t.Fatalf("b's takeover at %d, its last acquisition noted at %d", e2, b.wrote.Load())
	}
	f.alive["a"] = true
	old := pinnedKV{KV: f.cli, rev: stale.Header.Revision}
	v := f.view("a")
	if v.Volumes, err = volumes.List(f.ctx, old); err != nil || len(v.Volumes) != 1 || v.Volumes[0].Owner != "a" {
		t.Fatalf("the stale copy's record: %+v %v, want owner a", v.Volumes, err)
	}
	v.reader = old
	p, err := f.node("a").reconcile(f.ctx, f.cli, v)
	if !errors.Is(err, owner.ErrHeld) || len(p.Held) != 0 {
		t.Fatalf("a on the stale copy: %+v %v, want nothing held and the acquisition refused (held)", p, err)
	}
	if k, ep, ok, err := owner.Current(f.ctx, f.cli, f.uuid); err != nil || !ok || k.Node != "b" || uint64(ep) != e2 {
		t.Fatalf("owner key after a's stale acquisition: %+v %d %v %v, want b's at %d", k, ep, ok, err, e2)
	}
}
