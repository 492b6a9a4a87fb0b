// Package viewcache keeps a node's copy of the keys under one etcd
// prefix, fed by a single watch, so that a reconcile pass reads its view
// from memory instead of asking etcd (the informer of Kubernetes
// controllers). Without it every node reads every record on every pass:
// N nodes each reading the whole cluster every period, a load quadratic
// in the cluster's size (docs/scale.md).
//
// The copy is at most the watch's delivery delay behind etcd. That is
// what a level-triggered pass tolerates anyway (its view is old by the
// time it acts); every write stays a compare-and-swap or a lease-guarded
// put against etcd itself, which the cache never serves. Until the first
// list completes, and whenever the watch fails (compaction, lost leader)
// until the list after it completes, reads go to etcd.
package viewcache

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cache is the copy of the keys under one prefix.
type Cache struct {
	prefix string

	mu     sync.Mutex
	kvs    map[string]*mvccpb.KeyValue
	rev    int64 // the revision the copy reflects
	synced bool  // a list completed and the watch after it runs
	hits   int64 // reads answered from the copy
	// moved is closed and replaced whenever rev moves or synced
	// changes (await).
	moved chan struct{}
}

// maxAwait bounds how long a read waits for the copy to reach the
// revision it asks (Since): the watch delivers within milliseconds on a
// healthy etcd; past this, etcd answers.
const maxAwait = time.Second

// New returns an empty cache of the keys under prefix.
func New(prefix string) *Cache {
	return &Cache{prefix: prefix, kvs: map[string]*mvccpb.KeyValue{}, moved: make(chan struct{})}
}

// Hits counts the reads (a Get, or a read-only transaction) the copy
// answered.
func (c *Cache) Hits() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

// Revision is the etcd revision the copy reflects, 0 while it is not
// synced.
func (c *Cache) Revision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		return 0
	}
	return c.rev
}

// Changed is told about what changed, after the copy has it: the events
// of one watch response in order, or resync after a list (the events
// since the copy's last revision are not known one by one then).
type Changed func(events []*clientv3.Event, resync bool)

// Run lists the prefix and applies its watch from the list's revision on,
// listing again after any watch failure, until ctx ends. changed (may be
// nil) is called after each change is in the copy, so that whatever it
// triggers reads the copy with the change.
func (c *Cache) Run(ctx context.Context, cli *clientv3.Client, changed Changed) {
	if changed == nil {
		changed = func([]*clientv3.Event, bool) {}
	}
	for ctx.Err() == nil {
		if err := c.follow(ctx, cli, changed); err != nil {
			c.unsync()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	c.unsync()
}

func (c *Cache) unsync() {
	c.mu.Lock()
	c.synced = false
	c.notifyLocked()
	c.mu.Unlock()
}

// follow is one list and the watch after it; it returns when the watch
// ends.
func (c *Cache) follow(ctx context.Context, cli *clientv3.Client, changed Changed) error {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := cli.Get(lctx, c.prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.kvs = make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		c.kvs[string(kv.Key)] = kv
	}
	c.rev, c.synced = resp.Header.Revision, true
	c.notifyLocked()
	c.mu.Unlock()
	changed(nil, true)
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	for wr := range cli.Watch(wctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		c.apply(wr)
		if len(wr.Events) > 0 {
			changed(wr.Events, false)
		}
	}
	return ctx.Err()
}

// apply applies one watch response: its events in order, then its
// revision (a progress notification moves the revision only).
func (c *Cache) apply(wr clientv3.WatchResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range wr.Events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(c.kvs, string(ev.Kv.Key))
		} else {
			c.kvs[string(ev.Kv.Key)] = ev.Kv
		}
	}
	if wr.Header.Revision > c.rev {
		c.rev = wr.Header.Revision
		c.notifyLocked()
	}
}

// notifyLocked wakes the reads waiting in await. Callers hold mu.
func (c *Cache) notifyLocked() {
	close(c.moved)
	c.moved = make(chan struct{})
}

// await waits until the copy reflects revision rev, or is not synced
// (then etcd answers), for at most maxAwait and while ctx lasts: a
// reader's own write is on its way through the watch, and waiting for it
// costs less than reading etcd.
func (c *Cache) await(ctx context.Context, rev int64) {
	if rev == 0 {
		return
	}
	t := time.NewTimer(maxAwait)
	defer t.Stop()
	for {
		c.mu.Lock()
		done, moved := !c.synced || c.rev >= rev, c.moved
		c.mu.Unlock()
		if done {
			return
		}
		select {
		case <-moved:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// get serves plain range reads (a key, or [key, end) for a prefix or
// range) from the copy, all at one revision, each sorted by key as etcd
// returns it; ok is false when the copy is not synced or is behind
// revision atLeast, or a read asks for more than a plain range under the
// prefix (plainRange).
func (c *Cache) get(atLeast int64, ops ...clientv3.Op) ([]*pb.RangeResponse, bool) {
	for _, op := range ops {
		if !plainRange(op) || !c.covers(op) {
			return nil, false
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced || c.rev < atLeast {
		return nil, false
	}
	out := make([]*pb.RangeResponse, len(ops))
	for i, op := range ops {
		out[i] = c.rangeLocked(op)
	}
	c.hits++
	return out, true
}

// covers says whether op's keys all lie under the cache's prefix.
func (c *Cache) covers(op clientv3.Op) bool {
	key, end := op.KeyBytes(), op.RangeBytes()
	return bytes.HasPrefix(key, []byte(c.prefix)) && (len(end) == 0 || withinPrefix(end, c.prefix))
}

// rangeLocked is op's range from the copy. Callers hold mu.
func (c *Cache) rangeLocked(op clientv3.Op) *pb.RangeResponse {
	key, end := op.KeyBytes(), op.RangeBytes()
	var kvs []*mvccpb.KeyValue
	if len(end) == 0 {
		if kv, ok := c.kvs[string(key)]; ok {
			kvs = append(kvs, kv)
		}
	} else {
		for k, kv := range c.kvs {
			if kb := []byte(k); bytes.Compare(kb, key) >= 0 && bytes.Compare(kb, end) < 0 {
				kvs = append(kvs, kv)
			}
		}
		sort.Slice(kvs, func(i, j int) bool { return bytes.Compare(kvs[i].Key, kvs[j].Key) < 0 })
	}
	if op.IsKeysOnly() {
		for i, kv := range kvs {
			kvs[i] = &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version} // as etcd answers keys only
		}
	}
	return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: c.rev}, Kvs: kvs, Count: int64(len(kvs))}
}

// withinPrefix says whether a range end stays inside prefix: the end of
// the prefix itself (clientv3.GetPrefixRangeEnd) or a key under it.
func withinPrefix(end []byte, prefix string) bool {
	return bytes.Equal(end, []byte(clientv3.GetPrefixRangeEnd(prefix))) || bytes.HasPrefix(end, []byte(prefix))
}

// plainRange says whether op reads keys as they are now with no option
// the copy does not answer: a revision, a limit, a sort order, revision
// filters, a count only, "from key".
func plainRange(op clientv3.Op) bool {
	return op.IsGet() && op.Rev() == 0 && op.Limit() == 0 && !op.IsSortSet() && !op.IsCountOnly() &&
		!op.IsOptsWithFromKey() && op.MinModRev() == 0 && op.MaxModRev() == 0 &&
		op.MinCreateRev() == 0 && op.MaxCreateRev() == 0
}
