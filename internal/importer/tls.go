package importer

import (
	"fmt"
	"strings"

	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// keys is where the importer's TLS pair keys live: Keys, or the kernel's
// .nvme keyring.
func (im *Importer) keys() fabrictls.Keys {
	if im.Keys != nil {
		return im.Keys
	}
	return fabrictls.KernelKeys{}
}

// pruneKeys revokes the TLS pair keys of this host (hostNQN) for drive
// exports (exporter.NQNPrefix) that the pass no longer needs: a key stays
// while a wanted connection to its subsystem uses TLS (desired) or a
// controller of this host to it is still there (ctrls, read after the
// pass: a kept controller looks the key up again on each reconnect).
// Keys of another host on a drive subsystem are this node's drive
// exporter's and never touched here. Without hostNQN nothing is pruned.
func (im *Importer) pruneKeys(hostNQN string, desired []nvmf.Options, ctrls []nvmf.Controller) error {
	if hostNQN == "" {
		return nil
	}
	used := map[string]bool{}
	for _, o := range desired {
		if o.TLS {
			used[o.NQN] = true
		}
	}
	for _, c := range ctrls {
		if c.HostNQN == hostNQN || c.HostNQN == "" { // "": unreadable, assume ours
			used[c.SubsystemNQN] = true
		}
	}
	owned := func(h, s string) bool { return h == hostNQN && strings.HasPrefix(s, exporter.NQNPrefix) && !used[s] }
	if _, err := fabrictls.PruneKeys(im.keys(), nil, owned); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return nil
}
