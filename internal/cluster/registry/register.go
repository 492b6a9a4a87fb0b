package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

// CntlIDClaimVersion is the schema version of a controller-ID block claim.
const CntlIDClaimVersion = 1

// registerAttempts bounds Register's read-compare-write rounds when other
// writers change the record or take the block it picked meanwhile.
const registerAttempts = 32

// Register writes rec as its node's record. What registration assigns
// once is kept from the stored record and never taken from rec: Joined
// (now for a new record) and CntlIDBlock (the lowest free block, claimed
// in the same transaction as the record, when the stored record has
// none). It reads before it writes and writes nothing when the read
// fails, and every write is conditional on the record's revision at that
// read (and on the block's claim being absent), so a transient etcd
// error or a concurrent writer can never reset a kept field. A record
// that differs only in Version and Updated is not written again.
// It returns the record as stored.
func Register(ctx context.Context, kv clientv3.KV, rec Node, now time.Time) (Node, error) {
	now = now.UTC()
	for attempt := range registerAttempts {
		old, rev, err := getRecord(ctx, kv, rec.Name)
		if err != nil {
			return Node{}, err
		}
		rec.Joined, rec.CntlIDBlock, rec.Updated = now, 0, now
		if old != nil {
			rec.Joined, rec.CntlIDBlock = old.Joined, old.CntlIDBlock
			if rec.CntlIDBlock != 0 && sameRecord(*old, rec) {
				return *old, nil
			}
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(keys.Node(rec.Name)), "=", rev)}
		var ops []clientv3.Op
		if rec.CntlIDBlock == 0 {
			b, held, err := freeBlock(ctx, kv, rec.Name, attempt)
			if err != nil {
				return Node{}, err
			}
			rec.CntlIDBlock = b
			if !held {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(keys.CntlIDBlock(b)), "=", 0))
				ops = append(ops, clientv3.OpPut(keys.CntlIDBlock(b), claimValue(rec.Name)))
			}
		}
		rec.Version = NodeVersion
		b, err := json.Marshal(rec)
		if err != nil {
			return Node{}, fmt.Errorf("registry: %w", err)
		}
		ops = append(ops, clientv3.OpPut(keys.Node(rec.Name), string(b)))
		resp, err := kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return Node{}, fmt.Errorf("registry: register node %s: %w", rec.Name, err)
		}
		if resp.Succeeded {
			return rec, nil
		}
	}
	return Node{}, fmt.Errorf("registry: register node %s: the record or its controller-ID block changed under each of %d attempts", rec.Name, registerAttempts)
}

// getRecord reads name's record and its mod revision (nil, 0 when there
// is none).
func getRecord(ctx context.Context, kv clientv3.KV, name string) (*Node, int64, error) {
	resp, err := kv.Get(ctx, keys.Node(name))
	if err != nil {
		return nil, 0, fmt.Errorf("registry: read node %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	var n Node
	if err := decode(resp.Kvs[0].Value, &n.Version, &n, NodeVersion); err != nil {
		return nil, 0, fmt.Errorf("registry: %s: %w", resp.Kvs[0].Key, err)
	}
	return &n, resp.Kvs[0].ModRevision, nil
}

// freeBlock is the block to give name: the lowest one whose claim
// already names it (held), else the skip+1-th lowest unclaimed block
// (nodes registering at once that lost a race spread out instead of
// racing for the same block again).
func freeBlock(ctx context.Context, kv clientv3.KV, name string, skip int) (block int, held bool, err error) {
	claims, err := blockClaims(ctx, kv)
	if err != nil {
		return 0, false, err
	}
	for b, c := range claims {
		if c == name && (!held || b < block) {
			block, held = b, true
		}
	}
	if held {
		return block, true, nil
	}
	for block = 1; ; block++ {
		if claims[block] == "" {
			if skip == 0 {
				return block, false, nil
			}
			skip--
		}
	}
}

// blockClaims maps every claimed controller-ID block to its node.
func blockClaims(ctx context.Context, kv clientv3.KV) (map[int]string, error) {
	resp, err := kv.Get(ctx, keys.CntlIDBlocksPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("registry: read controller-ID blocks: %w", err)
	}
	out := map[int]string{}
	for _, kv := range resp.Kvs {
		b, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), keys.CntlIDBlocksPrefix))
		if err != nil || b < 1 {
			return nil, fmt.Errorf("registry: controller-ID block key %q: not a block number", kv.Key)
		}
		var c model.CntlIDClaim
		if err := decode(kv.Value, &c.Version, &c, CntlIDClaimVersion); err != nil {
			return nil, fmt.Errorf("registry: %s: %w", kv.Key, err)
		}
		if c.Node == "" {
			return nil, fmt.Errorf("registry: %s: claim names no node", kv.Key)
		}
		out[b] = c.Node
	}
	return out, nil
}

func claimValue(name string) string {
	b, _ := json.Marshal(model.CntlIDClaim{Version: CntlIDClaimVersion, Node: name})
	return string(b)
}

// sameRecord says whether a and b differ only in Version and Updated.
func sameRecord(a, b Node) bool {
	a.Version, b.Version = 0, 0
	a.Updated, b.Updated = time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
