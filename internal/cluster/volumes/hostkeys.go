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

// NodeKeys are one node's DH-HMAC-CHAP secrets in DHHC-1 form: Host is
// what it presents when it connects, Ctrl what its nvmet presents to the
// hosts (bidirectional authentication; empty: none), Pending the host
// secret a rotation announced (model.HostKey.PendingSecret; empty: none).
// Never log them.
type NodeKeys struct {
	Host, Ctrl, Pending string
}

// EnsureHostKey publishes node's DH-HMAC-CHAP host secret and returns it
// (EnsureNodeKeys without a controller secret).
func EnsureHostKey(ctx context.Context, kv clientv3.KV, node string, local func() (string, error)) (string, error) {
	k, err := EnsureNodeKeys(ctx, kv, node, func() (NodeKeys, error) {
		s, err := local()
		return NodeKeys{Host: s}, err
	})
	return k.Host, err
}

// EnsureNodeKeys publishes node's DH-HMAC-CHAP host and controller
// secrets and returns them. local returns the node's own secrets (made
// once and kept in 0600 files by the caller); they are the truth,
// because they are what the node presents: the record in etcd is written
// when absent or different (a node whose state directory was recreated
// made new secrets, or a rotation). Only the node itself calls
// EnsureNodeKeys for its name.
//
// The secrets are never logged: errors name the node, not the key.
func EnsureNodeKeys(ctx context.Context, kv clientv3.KV, node string, local func() (NodeKeys, error)) (NodeKeys, error) {
	nk, err := local()
	if err != nil {
		return NodeKeys{}, fmt.Errorf("volumes: host key of %s: %w", node, err)
	}
	want := model.HostKey{Version: model.HostKeyVersion, Secret: nk.Host, CtrlSecret: nk.Ctrl, PendingSecret: nk.Pending}
	if err := checkKeys(want); err != nil {
		return NodeKeys{}, fmt.Errorf("volumes: host key of %s: %w", node, err)
	}
	k := keys.HostKey(node)
	resp, err := kv.Get(ctx, k)
	if err != nil {
		return NodeKeys{}, fmt.Errorf("volumes: host key of %s: %w", node, err)
	}
	if len(resp.Kvs) > 0 {
		if h, err := DecodeHostKey(resp.Kvs[0].Value); err == nil && h == want {
			return nk, nil
		}
	}
	b, _ := json.Marshal(want)
	if _, err := kv.Put(ctx, k, string(b)); err != nil {
		return NodeKeys{}, fmt.Errorf("volumes: put host key of %s: %w", node, err)
	}
	return nk, nil
}

// HostKeys returns every node's DH-HMAC-CHAP secret (DHHC-1 form) by
// node name.
func HostKeys(ctx context.Context, kv clientv3.KV) (map[string]nvmf.SecretText, error) {
	hs, _, err := AllNodeKeys(ctx, kv)
	return hs, err
}

// AllNodeKeys returns every node's DH-HMAC-CHAP host secret and, for the
// nodes that have one, its controller secret, by node name.
func AllNodeKeys(ctx context.Context, kv clientv3.KV) (host, ctrl map[string]nvmf.SecretText, err error) {
	recs, err := HostKeyRecords(ctx, kv)
	if err != nil {
		return nil, nil, err
	}
	host, ctrl = SplitNodeKeys(recs)
	return host, ctrl, nil
}

// SplitNodeKeys returns the host secrets in force and the controller
// secrets (of the nodes that have one) of host key records, by node name.
// Pure.
func SplitNodeKeys(recs map[string]model.HostKey) (host, ctrl map[string]nvmf.SecretText) {
	host = make(map[string]nvmf.SecretText, len(recs))
	ctrl = make(map[string]nvmf.SecretText, len(recs))
	for name, h := range recs {
		host[name] = nvmf.SecretText(h.Secret)
		if h.CtrlSecret != "" {
			ctrl[name] = nvmf.SecretText(h.CtrlSecret)
		}
	}
	return host, ctrl
}

// HostKeyRecords returns every node's host key record by node name.
func HostKeyRecords(ctx context.Context, kv clientv3.KV) (map[string]model.HostKey, error) {
	resp, err := kv.Get(ctx, keys.HostKeysPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("volumes: host keys: %w", err)
	}
	recs := make(map[string]model.HostKey, len(resp.Kvs))
	for _, e := range resp.Kvs {
		h, err := DecodeHostKey(e.Value)
		if err != nil {
			return nil, fmt.Errorf("volumes: %s: %w", e.Key, err)
		}
		recs[string(e.Key[len(keys.HostKeysPrefix):])] = h
	}
	return recs, nil
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
	if err := checkKeys(h); err != nil {
		return model.HostKey{}, err
	}
	return h, nil
}

// checkKeys: the host secret is well formed, the controller secret and
// the pending host secret too when present, and the controller secret
// differs from both host secrets (one key for both directions would let
// whoever answers a challenge with it pass for the other side).
func checkKeys(h model.HostKey) error {
	if _, err := nvmf.ParseSecret(h.Secret); err != nil {
		return err
	}
	if h.PendingSecret != "" {
		if _, err := nvmf.ParseSecret(h.PendingSecret); err != nil {
			return fmt.Errorf("pending host secret: %w", err)
		}
		if h.PendingSecret == h.CtrlSecret {
			return fmt.Errorf("controller secret equals the pending host secret")
		}
	}
	if h.CtrlSecret == "" {
		return nil
	}
	if _, err := nvmf.ParseSecret(h.CtrlSecret); err != nil {
		return fmt.Errorf("controller secret: %w", err)
	}
	if h.CtrlSecret == h.Secret {
		return fmt.Errorf("controller secret equals the host secret")
	}
	return nil
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
