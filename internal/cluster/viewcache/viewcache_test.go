package viewcache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
)

const prefix = "/fabraid/v1/"

// waitRev waits until the copy reflects revision rev.
func waitRev(t *testing.T, c *Cache, rev int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Revision() < rev {
		if time.Now().After(deadline) {
			t.Fatalf("cache at revision %d, want %d", c.Revision(), rev)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kvsOf is what a range response holds, comparable across the copy and
// etcd.
func kvsOf(r *clientv3.GetResponse) []string {
	var out []string
	for _, kv := range r.Kvs {
		out = append(out, fmt.Sprintf("%s=%s@%d/%d/%d/%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease))
	}
	return out
}

// A random history of puts, deletes and lease expiries: after each batch
// the copy answers every read exactly as etcd does at the same revision
// (prefix reads in key order, single keys, keys only, a read-only
// transaction of several prefixes at one revision), and it answered them
// itself, not by asking etcd.
func TestCacheFollowsEtcd(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New(prefix)
	kv := c.KV(cli)
	if _, err := kv.Get(ctx, prefix+"nodes/a"); err != nil { // before the copy: etcd answers
		t.Fatal(err)
	}
	if c.Hits() != 0 {
		t.Fatal("the copy answered before it was synced")
	}
	go c.Run(ctx, cli, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"nodes/a", "nodes/b", "alive/a", "alive/b", "volumes/u1", "volumes/u2", "owners/u1", "drains/c"}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 30; round++ {
		var last int64
		for i := 0; i < 1+rng.IntN(6); i++ {
			k := prefix + keys[rng.IntN(len(keys))]
			var rev int64
			switch rng.IntN(4) {
			case 0:
				r, err := cli.Delete(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				rev = r.Header.Revision
			case 1:
				r, err := cli.Put(ctx, k, fmt.Sprint(round, i), clientv3.WithLease(lease.ID))
				if err != nil {
					t.Fatal(err)
				}
				rev = r.Header.Revision
			default:
				r, err := cli.Put(ctx, k, fmt.Sprint(round, i))
				if err != nil {
					t.Fatal(err)
				}
				rev = r.Header.Revision
			}
			last = max(last, rev)
		}
		if round == 20 {
			if _, err := cli.Revoke(ctx, lease.ID); err != nil { // every key on it goes at once
				t.Fatal(err)
			}
			if lease, err = cli.Grant(ctx, 60); err != nil {
				t.Fatal(err)
			}
			r, err := cli.Get(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			last = r.Header.Revision
		}
		waitRev(t, c, last)
		hits := c.Hits()
		for _, q := range []struct {
			key  string
			opts []clientv3.OpOption
		}{
			{prefix, []clientv3.OpOption{clientv3.WithPrefix()}},
			{prefix + "nodes/", []clientv3.OpOption{clientv3.WithPrefix()}},
			{prefix + "volumes/u1", nil},
			{prefix + "alive/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly()}},
		} {
			got, err := kv.Get(ctx, q.key, q.opts...)
			if err != nil {
				t.Fatal(err)
			}
			want, err := cli.Get(ctx, q.key, append(q.opts, clientv3.WithRev(c.Revision()))...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(kvsOf(got), kvsOf(want)) {
				t.Fatalf("round %d, %s: copy %v, etcd %v", round, q.key, kvsOf(got), kvsOf(want))
			}
		}
		tr, err := kv.Txn(ctx).Then(clientv3.OpGet(prefix+"nodes/", clientv3.WithPrefix()), clientv3.OpGet(prefix+"alive/", clientv3.WithPrefix())).Commit()
		if err != nil || len(tr.Responses) != 2 {
			t.Fatalf("read-only transaction: %v, %+v", err, tr)
		}
		if got := c.Hits() - hits; got != 5 {
			t.Fatalf("round %d: %d of 5 reads answered from the copy", round, got)
		}
	}
}

// What the copy does not answer goes to etcd: writes, transactions with
// a comparison (a compare-and-swap still decides against etcd), reads with
// a limit or a revision, keys outside the prefix.
func TestCachePassesThrough(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New(prefix)
	go c.Run(ctx, cli, nil)
	kv := c.KV(cli)
	r, err := kv.Put(ctx, prefix+"volumes/u1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	waitRev(t, c, r.Header.Revision)
	hits := c.Hits()
	// A compare-and-swap against the revision the copy showed succeeds
	// once; the second, with the copy possibly behind, is refused by etcd.
	for i, want := range []bool{true, false} {
		tr, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(prefix+"volumes/u1"), "=", r.Header.Revision)).
			Then(clientv3.OpPut(prefix+"volumes/u1", fmt.Sprint("v", i+2))).Commit()
		if err != nil || tr.Succeeded != want {
			t.Fatalf("CAS %d: succeeded %v (%v), want %v", i, tr.Succeeded, err, want)
		}
	}
	if _, err := kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, prefix+"volumes/u1", clientv3.WithRev(r.Header.Revision)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "/other/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if got := c.Hits() - hits; got != 0 {
		t.Fatalf("%d of these reads were answered from the copy", got)
	}
}

// A reader made by Since(kv, rev) reads the copy only once the copy
// reflects rev (the reader's own write): it waits for the watch to bring
// it, and etcd answers its gets and read-only transactions when the copy
// does not get there in time. A read right after a write is answered by
// the copy, which waited for the write.
func TestSinceWaitsForTheRevision(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New(prefix)
	go c.Run(ctx, cli, nil)
	put, err := cli.Put(ctx, prefix+"owners/u1", "a")
	if err != nil {
		t.Fatal(err)
	}
	waitRev(t, c, put.Header.Revision)
	kv := c.KV(cli)
	read := func(r clientv3.KV) int64 {
		h := c.Hits()
		if _, err := r.Get(ctx, prefix+"owners/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Txn(ctx).Then(clientv3.OpGet(prefix+"owners/", clientv3.WithPrefix())).Commit(); err != nil {
			t.Fatal(err)
		}
		return c.Hits() - h
	}
	if n := read(Since(kv, c.Revision()+1)); n != 0 {
		t.Fatalf("the copy at %d answered %d reads asked at least %d", c.Revision(), n, c.Revision()+1)
	}
	if n := read(Since(Since(kv, c.Revision()), 1)); n != 2 {
		t.Fatalf("the copy answered %d of 2 reads at its own revision", n)
	}
	for i := range 20 {
		put, err := cli.Put(ctx, prefix+"owners/u1", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if n := read(Since(kv, put.Header.Revision)); n != 2 {
			t.Fatalf("write %d: the copy answered %d of 2 reads right after it, want both (waiting for the write)", i, n)
		}
	}
	if r := Since(cli, 1); r != clientv3.KV(cli) {
		t.Fatal("Since of a plain client is not that client")
	}
}
