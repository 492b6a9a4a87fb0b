package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

// Planned moves and consumer paths (docs/cluster.md, "Planned move").
//
// A move is decided by one transaction: the volume record's owner becomes
// the target and the move record (keys.Move) is written, both only if
// neither changed since they were read. The old owner then drains and
// hands over, and moves the record's phase on with UpdateMove.

// StoredMove is a move record and its mod revision.
type StoredMove struct {
	model.Move
	Rev int64
}

// StartMove moves volume m.Volume's record owner to m.To and writes move
// record m (From: the record's owner), in one transaction. usable sees the record and the current
// move (nil when none) as read; an error from it is returned and nothing
// is written. A concurrent change of either key makes it read again.
func StartMove(ctx context.Context, kv clientv3.KV, m model.Move, usable func(model.Volume, *model.Move) error) (model.Volume, error) {
	for {
		v, rev, ok, err := Get(ctx, kv, m.Volume)
		if err != nil {
			return model.Volume{}, err
		}
		if !ok {
			return model.Volume{}, fmt.Errorf("volumes: move %s: %w", m.Volume, ErrNotFound)
		}
		cur, mrev, has, err := GetMove(ctx, kv, m.Volume)
		if err != nil {
			return model.Volume{}, err
		}
		var curp *model.Move
		if has {
			curp = &cur.Move
		}
		if err := usable(v, curp); err != nil {
			return model.Volume{}, err
		}
		m.From, v.Owner = v.Owner, m.To
		if err := check(v); err != nil {
			return model.Volume{}, err
		}
		v.Version, m.Version = model.VolumeVersion, model.MoveVersion
		vb, _ := json.Marshal(v)
		mb, _ := json.Marshal(m)
		vk, mk := keys.Volume(m.Volume), keys.Move(m.Volume)
		resp, err := kv.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(vk), "=", rev),
			clientv3.Compare(clientv3.ModRevision(mk), "=", mrev),
		).Then(clientv3.OpPut(vk, string(vb)), clientv3.OpPut(mk, string(mb))).Commit()
		if err != nil {
			return model.Volume{}, fmt.Errorf("volumes: move %q (%s): %w", v.Name, m.Volume, err)
		}
		if resp.Succeeded {
			return v, nil
		}
		if err := ctx.Err(); err != nil {
			return model.Volume{}, fmt.Errorf("volumes: move %q (%s): %w", v.Name, m.Volume, err)
		}
	}
}

// GetMove returns the move record of volume uuid and its mod revision (0
// when there is none).
func GetMove(ctx context.Context, kv clientv3.KV, uuid string) (StoredMove, int64, bool, error) {
	resp, err := kv.Get(ctx, keys.Move(uuid))
	if err != nil {
		return StoredMove{}, 0, false, fmt.Errorf("volumes: get move of %s: %w", uuid, err)
	}
	if len(resp.Kvs) == 0 {
		return StoredMove{}, 0, false, nil
	}
	m, err := DecodeMove(resp.Kvs[0].Value)
	if err != nil {
		return StoredMove{}, 0, false, fmt.Errorf("volumes: %s: %w", resp.Kvs[0].Key, err)
	}
	return StoredMove{m, resp.Kvs[0].ModRevision}, resp.Kvs[0].ModRevision, true, nil
}

// ListMoves returns every move record by volume UUID.
func ListMoves(ctx context.Context, kv clientv3.KV) (map[string]StoredMove, error) {
	resp, err := kv.Get(ctx, keys.MovesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("volumes: list moves: %w", err)
	}
	out := make(map[string]StoredMove, len(resp.Kvs))
	for _, e := range resp.Kvs {
		m, err := DecodeMove(e.Value)
		if err != nil {
			return nil, fmt.Errorf("volumes: %s: %w", e.Key, err)
		}
		out[string(e.Key[len(keys.MovesPrefix):])] = StoredMove{m, e.ModRevision}
	}
	return out, nil
}

// ErrMoveChanged: UpdateMove found the move record changed since it was
// read.
var ErrMoveChanged = errors.New("the move record changed meanwhile")

// UpdateMove writes m over the move record of m.Volume if that is still
// at mod revision rev (ErrMoveChanged otherwise).
func UpdateMove(ctx context.Context, kv clientv3.KV, rev int64, m model.Move) error {
	m.Version = model.MoveVersion
	b, _ := json.Marshal(m)
	k := keys.Move(m.Volume)
	resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("volumes: update move of %s: %w", m.Volume, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("volumes: update move of %s: %w", m.Volume, ErrMoveChanged)
	}
	return nil
}

// DecodeMove decodes a move record.
func DecodeMove(b []byte) (model.Move, error) {
	var m model.Move
	if err := decode(b, &m.Version, &m, model.MoveVersion); err != nil {
		return model.Move{}, err
	}
	if err := checkUUID(m.Volume); err != nil {
		return model.Move{}, err
	}
	return m, nil
}

// PutPaths writes node p.Node's consumer paths on lease.
func PutPaths(ctx context.Context, kv clientv3.KV, lease clientv3.LeaseID, p model.NodePaths) error {
	p.Version = model.PathsVersion
	b, _ := json.Marshal(p)
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	if _, err := kv.Put(ctx, keys.Paths(p.Node), string(b), opts...); err != nil {
		return fmt.Errorf("volumes: put paths of %s: %w", p.Node, err)
	}
	return nil
}

// ListPaths returns every node's published consumer paths by node name.
func ListPaths(ctx context.Context, kv clientv3.KV) (map[string]model.NodePaths, error) {
	resp, err := kv.Get(ctx, keys.PathsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("volumes: list paths: %w", err)
	}
	out := make(map[string]model.NodePaths, len(resp.Kvs))
	for _, e := range resp.Kvs {
		var p model.NodePaths
		if err := decode(e.Value, &p.Version, &p, model.PathsVersion); err != nil {
			return nil, fmt.Errorf("volumes: %s: %w", e.Key, err)
		}
		out[string(e.Key[len(keys.PathsPrefix):])] = p
	}
	return out, nil
}
