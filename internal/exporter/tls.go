package exporter

import (
	"fmt"
	"strings"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmetls"
)

// pruneKeys removes the TLS pair keys of this node's drive exports that
// keep (this reconcile's Desired.Keys) no longer holds: keys whose
// subsystem is a drive export (NQNPrefix) and whose host is another node
// than hostNQN (this node's own host keys are its importer's). Without
// hostNQN nothing is pruned, since the two cannot be told apart.
func (x *Exporter) pruneKeys(hostNQN string, keep []nvmetls.Derived) error {
	if hostNQN == "" {
		return nil
	}
	var ks fabrictls.Keys = fabrictls.KernelKeys{}
	if x.Keys != nil {
		ks = x.Keys
	}
	owned := func(h, s string) bool { return h != hostNQN && strings.HasPrefix(s, NQNPrefix) }
	if _, err := fabrictls.PruneKeys(ks, keep, owned); err != nil {
		return fmt.Errorf("drive exporter: %w", err)
	}
	return nil
}
