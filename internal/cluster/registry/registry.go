// Package registry is the node registry in etcd: what each node is (a
// durable record at keys.Node) and whether it is alive (a key at
// keys.Alive attached to the node's lease).
//
// # Liveness
//
// Heartbeat opens an etcd session (a lease kept alive by the client every
// TTL/3) and puts the node's alive key on it. When the node stops renewing
// (process killed, network cut, host down) etcd deletes the key once the
// lease expires, no sooner than TTL after the last renewal and possibly
// later (a new etcd leader extends leases): a node is dead exactly when
// its alive key is absent. Close revokes the lease, so a node that leaves
// cleanly turns dead at once.
//
// Records are JSON with a "version" field (NodeVersion, AliveVersion);
// readers refuse versions newer than theirs with an error that says so.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

// Schema versions of the records.
const (
	NodeVersion  = 1
	AliveVersion = 1
	DrainVersion = 1
	DownVersion  = 1
)

// The record types live in package model (no etcd dependency), so the
// CLI can decode them without linking etcd.
type (
	Drive  = model.Drive
	Node   = model.Node
	Alive  = model.Alive
	Status = model.NodeStatus
)

// Put writes n's record as it is (Version is set); nodes register with
// Register, which keeps what registration assigned once.
func Put(ctx context.Context, kv clientv3.KV, n Node) error {
	n.Version = NodeVersion
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if _, err := kv.Put(ctx, keys.Node(n.Name), string(b)); err != nil {
		return fmt.Errorf("registry: put node %s: %w", n.Name, err)
	}
	return nil
}

// Get returns one node's record; ok is false when there is none.
func Get(ctx context.Context, kv clientv3.KV, name string) (Status, bool, error) {
	all, err := List(ctx, kv)
	if err != nil {
		return Status{}, false, err
	}
	for _, s := range all {
		if s.Name == name {
			return s, true, nil
		}
	}
	return Status{}, false, nil
}

// List returns every registered node with its liveness, by name. Both
// prefixes are read at one revision.
func List(ctx context.Context, kv clientv3.KV) ([]Status, error) {
	resp, err := kv.Txn(ctx).Then(
		clientv3.OpGet(keys.NodesPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(keys.AlivePrefix, clientv3.WithPrefix()),
		clientv3.OpGet(keys.DrainsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(keys.DownPrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("registry: list: %w", err)
	}
	drains := map[string]model.Drain{}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		var d model.Drain
		if err := decode(kv.Value, &d.Version, &d, DrainVersion); err != nil {
			return nil, fmt.Errorf("registry: %s: %w", kv.Key, err)
		}
		drains[string(kv.Key[len(keys.DrainsPrefix):])] = d
	}
	down := map[string]model.Down{}
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		var d model.Down
		if err := decode(kv.Value, &d.Version, &d, DownVersion); err != nil {
			return nil, fmt.Errorf("registry: %s: %w", kv.Key, err)
		}
		down[string(kv.Key[len(keys.DownPrefix):])] = d
	}
	alive := map[string]Alive{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var a Alive
		if err := decode(kv.Value, &a.Version, &a, AliveVersion); err != nil {
			return nil, fmt.Errorf("registry: %s: %w", kv.Key, err)
		}
		alive[string(kv.Key[len(keys.AlivePrefix):])] = a
	}
	var out []Status
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var n Node
		if err := decode(kv.Value, &n.Version, &n, NodeVersion); err != nil {
			return nil, fmt.Errorf("registry: %s: %w", kv.Key, err)
		}
		a, ok := alive[n.Name]
		d, drained := drains[n.Name]
		out = append(out, Status{Node: n, Alive: ok, AliveSince: a.Since, Drained: drained, DrainedSince: d.Since,
			DownSince: down[n.Name].Since})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func decode(b []byte, version *int, v any, max int) error {
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	if *version < 1 || *version > max {
		return fmt.Errorf("schema version %d, this fabraid reads 1..%d (upgrade it)", *version, max)
	}
	return nil
}

// Delete removes a node's record, liveness key, host key and the claims
// of its controller-ID blocks (the blocks become free for a later node).
func Delete(ctx context.Context, kv clientv3.KV, name string) error {
	claims, err := blockClaims(ctx, kv)
	if err != nil {
		return fmt.Errorf("registry: delete node %s: %w", name, err)
	}
	ops := []clientv3.Op{clientv3.OpDelete(keys.Node(name)), clientv3.OpDelete(keys.Alive(name)), clientv3.OpDelete(keys.HostKey(name)),
		clientv3.OpDelete(keys.Drain(name)), clientv3.OpDelete(keys.Down(name))}
	for b, c := range claims {
		if c == name {
			ops = append(ops, clientv3.OpDelete(keys.CntlIDBlock(b)))
		}
	}
	if _, err := kv.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("registry: delete node %s: %w", name, err)
	}
	return nil
}

// ErrUnknownNode is returned by SetDrained for a node without a record.
var ErrUnknownNode = errors.New("no such node")

// SetDrained marks node name drained (since now) or not. A node is drained
// only while its record exists; marking a drained node drained again
// keeps its first time.
func SetDrained(ctx context.Context, kv clientv3.KV, name string, drained bool, now time.Time) error {
	if !drained {
		if _, err := kv.Delete(ctx, keys.Drain(name)); err != nil {
			return fmt.Errorf("registry: undrain node %s: %w", name, err)
		}
		return nil
	}
	b, _ := json.Marshal(model.Drain{Version: DrainVersion, Since: now.UTC()})
	resp, err := kv.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(keys.Node(name)), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(keys.Drain(name)), "=", 0),
	).Then(clientv3.OpPut(keys.Drain(name), string(b))).Else(
		clientv3.OpGet(keys.Node(name), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return fmt.Errorf("registry: drain node %s: %w", name, err)
	}
	if !resp.Succeeded && resp.Responses[0].GetResponseRange().Count == 0 {
		return fmt.Errorf("registry: drain node %s: %w", name, ErrUnknownNode)
	}
	return nil
}

// MarkDown records that node name has been dead since now, as seen by
// node by: only while name's record exists and its alive key is absent
// (a node that came back meanwhile is not marked), and only once (the
// first time is kept). ok says whether this call wrote the record.
func MarkDown(ctx context.Context, kv clientv3.KV, name, by string, now time.Time) (ok bool, err error) {
	b, _ := json.Marshal(model.Down{Version: DownVersion, Since: now.UTC(), SeenBy: by})
	resp, err := kv.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(keys.Node(name)), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(keys.Alive(name)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(keys.Down(name)), "=", 0),
	).Then(clientv3.OpPut(keys.Down(name), string(b))).Commit()
	if err != nil {
		return false, fmt.Errorf("registry: mark node %s down: %w", name, err)
	}
	return resp.Succeeded, nil
}

// ClearDown deletes node name's down record, only while its alive key
// exists (it is back). ok says whether this call deleted it.
func ClearDown(ctx context.Context, kv clientv3.KV, name string) (ok bool, err error) {
	resp, err := kv.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(keys.Alive(name)), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(keys.Down(name)), ">", 0),
	).Then(clientv3.OpDelete(keys.Down(name))).Commit()
	if err != nil {
		return false, fmt.Errorf("registry: clear node %s down: %w", name, err)
	}
	return resp.Succeeded, nil
}

// Heartbeat keeps a node's alive key on a lease of ttl seconds.
type Heartbeat struct {
	s    *concurrency.Session
	name string
}

// StartHeartbeat puts name's alive key on a new session lease. ctx bounds
// the lease grant and the put only: the lease is kept alive until Close
// or Abandon (or the client closes), whatever becomes of ctx. Done fires
// when the lease is lost (expired, revoked, or no longer renewed).
func StartHeartbeat(ctx context.Context, cli *clientv3.Client, name string, ttl int, pid int, now time.Time) (*Heartbeat, error) {
	g, err := cli.Grant(ctx, int64(ttl))
	if err != nil {
		return nil, fmt.Errorf("registry: heartbeat lease of %s: %w", name, err)
	}
	// The session's context is also the one its Close revokes with: it
	// must outlive ctx (a request's or a start step's deadline).
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithLease(g.ID), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(ttl)*time.Second)
		cli.Revoke(rctx, g.ID)
		cancel()
		return nil, fmt.Errorf("registry: heartbeat session of %s: %w", name, err)
	}
	b, _ := json.Marshal(Alive{Version: AliveVersion, Since: now.UTC(), PID: pid, Lease: fmt.Sprintf("%x", s.Lease())})
	if _, err := cli.Put(ctx, keys.Alive(name), string(b), clientv3.WithLease(s.Lease())); err != nil {
		s.Close()
		return nil, fmt.Errorf("registry: put alive key of %s: %w", name, err)
	}
	return &Heartbeat{s: s, name: name}, nil
}

// Done is closed when the lease is gone.
func (h *Heartbeat) Done() <-chan struct{} { return h.s.Done() }

// Close stops renewing and revokes the lease: the node turns dead at
// once. Like Abandon when the revoke fails (ctx ends, or the member has
// no leader: it says so at once instead of holding the revoke until ctx
// ends): the lease then expires after its TTL.
func (h *Heartbeat) Close(ctx context.Context) error {
	h.s.Orphan()
	_, err := h.s.Client().Revoke(clientv3.WithRequireLeader(ctx), h.s.Lease())
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("registry: revoke the heartbeat lease of %s: %w", h.name, err)
	}
	return nil
}

// Abandon stops renewing without revoking: the node turns dead when the
// lease expires (what a crash looks like to the others).
func (h *Heartbeat) Abandon() { h.s.Orphan() }
