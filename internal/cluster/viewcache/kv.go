package viewcache

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// KV returns a clientv3.KV that answers plain range reads under the
// cache's prefix from the copy while it is synced, and read-only
// transactions made of such reads (registry.List reads four prefixes in
// one); everything else, and every read while the copy is not synced,
// goes to kv.
func (c *Cache) KV(kv clientv3.KV) clientv3.KV { return &cachedKV{KV: kv, c: c} }

// Since returns kv reading the copy only once the copy reflects revision
// rev: a caller that wrote at rev reads its own write. A read waits for
// the copy to reach rev (at most maxAwait), then asks etcd. kv not made
// by Cache.KV is returned as it is.
func Since(kv clientv3.KV, rev int64) clientv3.KV {
	k, ok := kv.(*cachedKV)
	if !ok {
		return kv
	}
	return &cachedKV{KV: k.KV, c: k.c, min: max(k.min, rev)}
}

type cachedKV struct {
	clientv3.KV
	c   *Cache
	min int64 // the copy answers only at this revision or later (Since)
}

func (k *cachedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.c.await(ctx, k.min)
	if r, ok := k.c.get(k.min, clientv3.OpGet(key, opts...)); ok {
		return (*clientv3.GetResponse)(r[0]), nil
	}
	return k.KV.Get(ctx, key, opts...)
}

func (k *cachedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	if op.IsGet() {
		k.c.await(ctx, k.min)
	}
	if r, ok := k.c.get(k.min, op); ok {
		return (*clientv3.GetResponse)(r[0]).OpResponse(), nil
	}
	return k.KV.Do(ctx, op)
}

func (k *cachedKV) Txn(ctx context.Context) clientv3.Txn {
	return &cachedTxn{c: k.c, min: k.min, ctx: ctx, kv: k.KV}
}

// cachedTxn collects a transaction; Commit answers it from the copy when
// it has no comparison and only reads the copy answers, and sends it to
// etcd otherwise.
type cachedTxn struct {
	c         *Cache
	min       int64
	ctx       context.Context
	kv        clientv3.KV
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
	usedIf    bool
	usedThen  bool
	usedElse  bool
}

func (t *cachedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.usedIf = true
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *cachedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.usedThen = true
	t.then = append(t.then, ops...)
	return t
}

func (t *cachedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.usedElse = true
	t.els = append(t.els, ops...)
	return t
}

func (t *cachedTxn) Commit() (*clientv3.TxnResponse, error) {
	if len(t.cmps) == 0 && len(t.els) == 0 {
		if r, ok := t.fromCache(); ok {
			return r, nil
		}
	}
	real := t.kv.Txn(t.ctx)
	if t.usedIf {
		real = real.If(t.cmps...)
	}
	if t.usedThen {
		real = real.Then(t.then...)
	}
	if t.usedElse {
		real = real.Else(t.els...)
	}
	return real.Commit()
}

// fromCache answers a comparison-free transaction of plain reads, all at
// one revision as etcd would.
func (t *cachedTxn) fromCache() (*clientv3.TxnResponse, bool) {
	if len(t.then) == 0 {
		return nil, false
	}
	t.c.await(t.ctx, t.min)
	rs, ok := t.c.get(t.min, t.then...)
	if !ok {
		return nil, false
	}
	resp := &clientv3.TxnResponse{Succeeded: true, Header: rs[0].Header}
	for _, r := range rs {
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: r}})
	}
	return resp, true
}
