package plan

import "github.com/fabraid/fabraid/internal/exporter"

// OwnerKey is the holder of a volume's owner key (package cluster/owner)
// and the key's epoch.
type OwnerKey struct {
	Node  string
	Epoch uint64
}

// FencedExporterInput is ExporterInput with each volume's drives exported
// to the node holding its owner key (keys, by volume UUID) rather than to
// the record's owner, which is only the desired one: the exporter serves
// exactly the node that may run the engine. Each volume carries the key's
// epoch; a volume without a key is exported to nobody (Owner and Epoch
// zero), as is one whose holder is not in the registry.
func FencedExporterInput(v View, drives []exporter.Drive, keys map[string]OwnerKey) exporter.Input {
	in := ExporterInput(v, drives)
	for i := range in.Volumes {
		ev := &in.Volumes[i]
		k, ok := keys[ev.UUID]
		ev.Owner, ev.Epoch = exporter.Host{}, 0
		if ok {
			if ev.Owner = v.host(k.Node); ev.Owner.NQN != "" {
				ev.Epoch = k.Epoch
			}
		}
	}
	return in
}
