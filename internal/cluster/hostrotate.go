package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// PendingHostKeyFile is the node's announced next DH-HMAC-CHAP host
// secret (DHHC-1 form, 0600) in Options.Dir while a host key rotation
// runs (docs/cluster.md, "Key rotation"); PromoteHostSecret renames it
// over HostKeyFile.
const PendingHostKeyFile = "dhchap.key.new"

// loadPending loads PendingHostKeyFile from dir: the zero Secret when
// there is none.
func loadPending(dir string) (nvmf.Secret, error) {
	s, err := nvmf.LoadSecret(filepath.Join(dir, PendingHostKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nvmf.Secret{}, nil
	}
	if err != nil {
		return nvmf.Secret{}, fmt.Errorf("pending host secret: %w", err)
	}
	return s, nil
}

// RotateHostSecret announces a new DH-HMAC-CHAP host secret: it is kept
// in PendingHostKeyFile and published as the pending key
// (model.HostKey.PendingSecret) beside the one in force, which the node
// keeps presenting (HostSecret) until PromoteHostSecret. A rotation
// already pending is kept (fresh reports whether a new key was made).
// The secrets are never logged.
func (n *Node) RotateHostSecret(ctx context.Context) (fresh bool, err error) {
	n.mu.Lock()
	cli, ctrl, pending := n.cli, n.ctrlSecret, n.hostPending
	n.mu.Unlock()
	if cli == nil || len(ctrl.Key) == 0 {
		return false, ErrNotInCluster
	}
	if len(pending.Key) == 0 {
		s, err := nvmf.GenerateSecret(32)
		if err != nil {
			return false, err
		}
		if err := nvmf.SaveSecret(filepath.Join(n.o.Dir, PendingHostKeyFile), s); err != nil {
			return false, fmt.Errorf("cluster: save the new host secret: %w", err)
		}
		fresh = true
	}
	if err := n.publishHostKey(ctx, cli); err != nil {
		return fresh, fmt.Errorf("cluster: announce the new host secret (kept in %s; published at the next refresh): %w", PendingHostKeyFile, err)
	}
	n.o.Log.Info("cluster: DH-HMAC-CHAP host secret rotation announced; the node switches to it once every target acknowledged it", "new", fresh)
	return fresh, nil
}

// HostPending is the announced next host secret (ok false when no
// rotation is pending). It prints redacted.
func (n *Node) HostPending() (nvmf.Secret, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hostPending, len(n.hostPending.Key) > 0
}

// PromoteHostSecret ends a host key rotation: the pending secret replaces
// HostKeyFile (renamed over it: the old secret is gone), HostSecret
// returns it at once, and etcd gets it as the node's secret, without a
// pending one; the acknowledgements are deleted. Call it only when every
// target that may allow this node has the pending key (the caller checks
// volumes.MissingHostKeyAcks): the node's next connections and re-keys
// use it. A failed publication is retried by Refresh (the files are the
// truth).
func (n *Node) PromoteHostSecret(ctx context.Context) error {
	n.mu.Lock()
	cli, pending := n.cli, n.hostPending
	n.mu.Unlock()
	if cli == nil {
		return ErrNotInCluster
	}
	if len(pending.Key) == 0 {
		return nil
	}
	if err := os.Rename(filepath.Join(n.o.Dir, PendingHostKeyFile), filepath.Join(n.o.Dir, HostKeyFile)); err != nil {
		return fmt.Errorf("cluster: promote the new host secret: %w", err)
	}
	n.mu.Lock()
	n.secret, n.hostPending = pending, nvmf.Secret{}
	n.mu.Unlock()
	if err := n.publishHostKey(ctx, cli); err != nil {
		return fmt.Errorf("cluster: publish the new host secret: %w", err)
	}
	if err := volumes.DeleteHostKeyAcks(ctx, cli, n.o.Name); err != nil {
		return err
	}
	n.o.Log.Info("cluster: DH-HMAC-CHAP host secret rotated; this node presents the new one")
	return nil
}
