package clusterplane

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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

// Txn pins the range reads of a comparison-free transaction (what the
// owner keys' read is).
func (k pinnedKV) Txn(ctx context.Context) clientv3.Txn {
	return pinnedTxn{Txn: k.KV.Txn(ctx), rev: k.rev}
}

type pinnedTxn struct {
	clientv3.Txn
	rev int64
}

func (t pinnedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	pinned := make([]clientv3.Op, len(ops))
	for i, op := range ops {
		pinned[i] = clientv3.OpGet(string(op.KeyBytes()), clientv3.WithRange(string(op.RangeBytes())), clientv3.WithRev(t.rev))
	}
	return pinnedTxn{Txn: t.Txn.Then(pinned...), rev: t.rev}
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

// countingLease counts the lease lookups (TimeToLive) a client asks.
type countingLease struct {
	clientv3.Lease
	asked atomic.Int32
}

func (l *countingLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	l.asked.Add(1)
	return l.Lease.TimeToLive(ctx, id, opts...)
}

// TestOwnershipLapseLearnedOnce: a holds v, c holds nothing; both end
// their owner sessions while their alive keys last. b learns both lapses
// from the owner keys and published sessions it reads (its copy in a
// daemon) and asks etcd no lease lookup: it takes v over at once (a
// lapsed) and counts c, which held no key, as lapsed too.
func TestOwnershipLapseLearnedOnce(t *testing.T) {
	f := newOwnerFixture(t)
	cb, err := clientv3.New(clientv3.Config{Endpoints: f.cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Close() })
	lookups := &countingLease{Lease: cb.Lease}
	cb.Lease = lookups
	a, b, c := f.node("a"), f.node("b"), f.node("c")
	e1 := f.run(a).Held[f.uuid]
	f.run(c)
	run := func() ownerPlan {
		p, err := b.reconcile(f.ctx, cb, f.view("b"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := run(); len(p.Held) != 0 {
		t.Fatalf("b while a holds v: %+v", p)
	}
	a.close(f.ctx)
	c.close(f.ctx)
	if p := run(); p.Held[f.uuid] <= e1 {
		t.Fatalf("b after a's session ended: %+v, want v taken over at an epoch > %d", p, e1)
	}
	if _, ok := b.lapsed["c"]; !ok {
		t.Errorf("c's session ended (no key held): not counted as lapsed (%v)", b.lapsed)
	}
	if n := lookups.asked.Load(); n != 0 {
		t.Errorf("b asked etcd %d lease lookups, want none (the lapse is in the keys it read)", n)
	}
}
