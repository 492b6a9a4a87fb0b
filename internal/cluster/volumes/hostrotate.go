package volumes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

// Host key rotation acknowledgements (docs/cluster.md, "Key rotation")
//
// A node rotating its host secret announces the new one as its pending
// key (model.HostKey.PendingSecret). Every other node's target puts it on
// that node's host entries in place, reads it back and acknowledges with
// AckHostKey; once MissingHostKeyAcks is empty the rotating node switches
// to the new secret, publishes it as its Secret and deletes the
// acknowledgements (DeleteHostKeyAcks).

// HostKeyFingerprint names a pending host secret in an acknowledgement:
// the first 16 bytes of SHA-256 over a fixed label and the secret, hex.
// It tells one rotation's key from another's and reveals nothing of it
// (the secret has 256 random bits). Pure.
func HostKeyFingerprint(secret string) string {
	sum := sha256.Sum256([]byte("fabraid host key ack\x00" + secret))
	return hex.EncodeToString(sum[:16])
}

// AckHostKey records that node by's target has node's pending host key
// pending (put only when the stored acknowledgement differs).
func AckHostKey(ctx context.Context, kv clientv3.KV, node, by, pending string) error {
	b, _ := json.Marshal(model.HostKeyAck{Version: model.HostKeyAckVersion, Fingerprint: HostKeyFingerprint(pending)})
	k := keys.HostKeyAck(node, by)
	if _, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", string(b))).Else(clientv3.OpPut(k, string(b))).Commit(); err != nil {
		return fmt.Errorf("volumes: acknowledge the pending host key of %s: %w", node, err)
	}
	return nil
}

// MissingHostKeyAcks returns the nodes of nodes (sorted) that have not
// acknowledged node's pending host key pending: no acknowledgement, one
// of another key, or one that cannot be read.
func MissingHostKeyAcks(ctx context.Context, kv clientv3.KV, node, pending string, nodes []string) ([]string, error) {
	resp, err := kv.Get(ctx, keys.HostKeyAcks(node), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("volumes: acknowledgements of the pending host key of %s: %w", node, err)
	}
	fp := HostKeyFingerprint(pending)
	acked := map[string]bool{}
	for _, e := range resp.Kvs {
		var a model.HostKeyAck
		if decode(e.Value, &a.Version, &a, model.HostKeyAckVersion) == nil && a.Fingerprint == fp {
			acked[string(e.Key[len(keys.HostKeyAcks(node)):])] = true
		}
	}
	var missing []string
	for _, n := range nodes {
		if !acked[n] {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing), nil
}

// DeleteHostKeyAcks removes every acknowledgement of node's pending host
// keys (the rotation is done, or the node is gone).
func DeleteHostKeyAcks(ctx context.Context, kv clientv3.KV, node string) error {
	if _, err := kv.Delete(ctx, keys.HostKeyAcks(node), clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("volumes: delete the host key acknowledgements of %s: %w", node, err)
	}
	return nil
}
