package plan

import (
	"maps"
	"slices"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// A planned move prepares its target (docs/cluster.md, "Planned move"):
// while the old owner O still holds the owner key, the target N imports
// the volume's members (its drives exported to O and N) without running
// anything; O drains only then. N writes nothing to the members before it
// holds the key and either every exporter has acknowledged the storage
// fence at its epoch or O released its imports (below); its importer
// only reads their superblocks. O, frozen and flushed, ends its own
// member imports before it resigns (the move record's Released), so the
// exporters drop O from the allowed hosts without ending N's controllers.

// WithHandovers is in (FencedExporterInput's result) with the hand-overs
// of planned moves (moves, by volume UUID): each volume whose key holder
// is a move's From, still exported to it, is exported to the move's To
// as well (exporter.Volume.Prepared) while To is the record's owner and
// alive; and once the key is another node's at a newer epoch, a From that
// released its imports (model.Move.Released) is named in
// exporter.Volume.Released.
func WithHandovers(in exporter.Input, v View, keys map[string]OwnerKey, moves map[string]model.Move) exporter.Input {
	recs := map[string]model.Volume{}
	for _, vol := range v.Volumes {
		recs[vol.UUID] = vol
	}
	for i := range in.Volumes {
		ev := &in.Volumes[i]
		m, ok := moves[ev.UUID]
		k, held := keys[ev.UUID]
		if !ok || !held || m.Phase == model.MoveFailed {
			continue
		}
		rec := recs[ev.UUID]
		to, _ := v.node(m.To)
		if !m.Over() && k.Node == m.From && rec.Owner == m.To && rec.State == model.VolumeReady && to.Alive {
			ev.Prepared = v.host(m.To)
		}
		if m.Released && k.Node != m.From && k.Epoch > m.Epoch {
			ev.Released = v.host(m.From).NQN
		}
	}
	return in
}

// ImporterInputPreparing is ImporterInput with the members of the
// volumes in prepare (this node is a planned move's target: the
// ownership decision Prepare) imported too. Those volumes are not in
// Import.Volumes (nothing assembles them) but in the second result, for
// PreparedVolumes.
func ImporterInputPreparing(v View, id nvmf.HostIdentity, local map[string]string, prepare []string) (Import, []Owned) {
	w := v
	w.Held = maps.Clone(v.Held)
	if w.Held == nil {
		w.Held = map[string]uint64{}
	}
	var extra []string
	for _, u := range prepare {
		if _, held := v.Held[u]; !held {
			w.Held[u] = 0
			extra = append(extra, u)
		}
	}
	imp := ImporterInput(w, id, local)
	var prep []Owned
	imp.Volumes = slices.DeleteFunc(imp.Volumes, func(o Owned) bool {
		if slices.Contains(extra, o.Volume.UUID) {
			prep = append(prep, o)
			return true
		}
		return false
	})
	return imp, prep
}

// PreparedVolumes are the UUIDs of the volumes of prep whose every
// member on a live node (MemberGone: not waited for) the importer found:
// the target of their move is prepared.
func PreparedVolumes(v View, prep []Owned, r importer.Result) []string {
	var out []string
	for _, o := range prep {
		ok := true
		for _, s := range o.Slots {
			if v.MemberGone(o.Volume, s.Node) {
				continue
			}
			if !s.Known || r.Paths[s.Member] == "" {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, o.Volume.UUID)
		}
	}
	return out
}
