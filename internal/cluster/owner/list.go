package owner

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// Key is one volume's owner key as read.
type Key struct {
	Record
	Epoch Epoch
}

// List returns every volume's owner key by volume UUID (one read).
func List(ctx context.Context, kv clientv3.KV) (map[string]Key, error) {
	resp, err := kv.Get(ctx, keys.OwnersPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("owner: list: %w", err)
	}
	out := map[string]Key{}
	for _, kv := range resp.Kvs {
		rec, err := decode(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("owner: %s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), keys.OwnersPrefix)] = Key{Record: rec, Epoch: Epoch(kv.CreateRevision)}
	}
	return out, nil
}

// LeaseString is how Record.Lease names lease id.
func LeaseString(id clientv3.LeaseID) string { return fmt.Sprintf("%x", id) }
