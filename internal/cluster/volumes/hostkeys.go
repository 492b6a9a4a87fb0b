package volumes

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// EnsureHostKey publishes node's DH-HMAC-CHAP host secret and returns it.
// local returns the node's own secret (made once and kept in a 0600 file
// by the caller); it is the truth, because it is what the node presents
// when it connects: the key in etcd is written when absent or different
// (a node whose state directory was recreated made a new secret). Only
// the node itself calls EnsureHostKey for its name.
//
// The secret is never logged: errors name the node, not the key.
func EnsureHostKey(ctx context.Context, kv clientv3.KV, node string, local func() (string, error)) (string, error) {
	secret, err := local()
	if err != nil {
		return "", fmt.Errorf("volumes: host key of %s: %w", node, err)
	}
	if _, err := nvmf.ParseSecret(secret); err != nil {
		return "", fmt.Errorf("volumes: host key of %s: %w", node, err)
	}
	k := keys.HostKey(node)
	resp, err := kv.Get(ctx, k)
	if err != nil {
		return "", fmt.Errorf("volumes: host key of %s: %w", node, err)
	}
	if len(resp.Kvs) > 0 {
		if h, err := DecodeHostKey(resp.Kvs[0].Value); err == nil && h.Secret == secret {
			return secret, nil
		}
	}
	b, _ := json.Marshal(model.HostKey{Version: model.HostKeyVersion, Secret: secret})
	if _, err := kv.Put(ctx, k, string(b)); err != nil {
		return "", fmt.Errorf("volumes: put host key of %s: %w", node, err)
	}
	return secret, nil
}

// HostKeys returns every node's DH-HMAC-CHAP secret (DHHC-1 form) by
// node name.
func HostKeys(ctx context.Context, kv clientv3.KV) (map[string]nvmf.SecretText, error) {
	resp, err := kv.Get(ctx, keys.HostKeysPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("volumes: host keys: %w", err)
	}
	out := make(map[string]nvmf.SecretText, len(resp.Kvs))
	for _, e := range resp.Kvs {
		h, err := DecodeHostKey(e.Value)
		if err != nil {
			return nil, fmt.Errorf("volumes: %s: %w", e.Key, err)
		}
		out[string(e.Key[len(keys.HostKeysPrefix):])] = nvmf.SecretText(h.Secret)
	}
	return out, nil
}

// DeleteHostKey removes node's host key (leave and remove of a node).
func DeleteHostKey(ctx context.Context, kv clientv3.KV, node string) error {
	if _, err := kv.Delete(ctx, keys.HostKey(node)); err != nil {
		return fmt.Errorf("volumes: delete host key of %s: %w", node, err)
	}
	return nil
}

// DecodeHostKey decodes and checks a host key record. A malformed secret
// is an error that does not quote it.
func DecodeHostKey(b []byte) (model.HostKey, error) {
	var h model.HostKey
	if err := decode(b, &h.Version, &h, model.HostKeyVersion); err != nil {
		return model.HostKey{}, redact(err)
	}
	if _, err := nvmf.ParseSecret(h.Secret); err != nil {
		return model.HostKey{}, err
	}
	return h, nil
}

// redact drops a JSON error's text, which may quote the secret.
func redact(err error) error {
	if _, ok := err.(*json.SyntaxError); ok {
		return fmt.Errorf("host key record is no valid JSON")
	}
	if _, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Errorf("host key record has a field of the wrong type")
	}
	return err
}
