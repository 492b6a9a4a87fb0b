package owner

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// Key is one volume's owner key as read.
type Key struct {
	Record
	Epoch   Epoch
	LeaseID clientv3.LeaseID // the lease the key is attached to (Record.Lease as an id)
}

// List returns every volume's owner key by volume UUID (one read).
func List(ctx context.Context, kv clientv3.KV) (map[string]Key, error) {
	resp, err := kv.Get(ctx, keys.OwnersPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("owner: list: %w", err)
	}
	return decodeKeys(resp.Kvs)
}

// LeaseString is how Record.Lease names lease id.
func LeaseString(id clientv3.LeaseID) string { return fmt.Sprintf("%x", id) }

// LeaseEnded says whether lease id has expired or been revoked at the
// server: a key that vanished with it lapsed (its holder's session ended),
// while a key deleted under a live lease was resigned.
func LeaseEnded(ctx context.Context, lc clientv3.Lease, id clientv3.LeaseID) (bool, error) {
	resp, err := lc.TimeToLive(ctx, id)
	if err != nil {
		return false, fmt.Errorf("owner: lease %s: %w", LeaseString(id), err)
	}
	return resp.TTL <= 0, nil
}
