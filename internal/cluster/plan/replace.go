package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/placement"
)

// ErrNoReplacement is wrapped when no free drive may take a member slot.
var ErrNoReplacement = errors.New("no replacement drive")

// Replacement picks the new member of slot of vol among the free drives
// of v (alive nodes, claimed, in no volume; spares included) of at least
// vol.MemberSize bytes, and returns the slot's member with the new node,
// domain and drive (UUID empty: the owner formats it). node and drive,
// when not empty, restrict the choice (--node, --drive).
//
// The rule is placement's: the group of slot (slots g*(K+M) ...
// g*(K+M)+K+M-1) keeps at most M members in one failure domain, the old
// member not counted. A drive in another domain than the old member's is
// refused when either domain is the owner's: the engine's member table
// keeps the slot's domain through a replace, and owner-domain journaling
// (which members die with the owner) is fixed by it.
//
// Preference: a spare, then the old member's node, then its domain, then
// the domain with the fewest members of the group, then node name and
// drive id.
func Replacement(v View, vol model.Volume, slot int, node, drive string) (model.VolumeMember, error) {
	return replacement(v, vol, slot, node, drive, false)
}

// SpareReplacement is Replacement among the spares only: what replaces a
// failed member at once.
func SpareReplacement(v View, vol model.Volume, slot int) (model.VolumeMember, error) {
	return replacement(v, vol, slot, "", "", true)
}

func replacement(v View, vol model.Volume, slot int, node, drive string, spareOnly bool) (model.VolumeMember, error) {
	w := vol.K + vol.M
	if slot < 0 || slot >= len(vol.Members) || w <= 0 {
		return model.VolumeMember{}, fmt.Errorf("%w: volume %q has slots 0..%d, not %d", ErrNoReplacement, vol.Name, len(vol.Members)-1, slot)
	}
	old := vol.Members[slot]
	inGroup := map[string]int{}
	for i := slot / w * w; i < slot/w*w+w; i++ {
		if i != slot {
			inGroup[vol.Members[i].Domain]++
		}
	}
	ownerDomain := vol.Owner
	if n, ok := v.node(vol.Owner); ok && n.Domain != "" {
		ownerDomain = n.Domain
	}
	type cand struct {
		n placement.Node
		d placement.Drive
	}
	var fit []cand
	var free []string
	for _, n := range placementNodes(v, true) {
		dom := n.Domain
		if dom == "" {
			dom = n.Name
		}
		n.Domain = dom
		for _, d := range n.Free {
			if (node != "" && n.Name != node) || (drive != "" && d.ID != drive) || (spareOnly && !d.Spare) {
				continue
			}
			why := ""
			switch {
			case d.Size < vol.MemberSize:
				why = fmt.Sprintf("%d bytes, members need %d", d.Size, vol.MemberSize)
			case inGroup[dom] >= vol.M:
				why = fmt.Sprintf("domain %s holds %d of the group's members already", dom, inGroup[dom])
			case dom != old.Domain && (dom == ownerDomain || old.Domain == ownerDomain):
				why = fmt.Sprintf("domain %s: a member moves into or out of the owner's domain %s only by a new volume (the engine keeps the slot's domain)", dom, ownerDomain)
			}
			if why != "" && d.Spare {
				why = "spare; " + why
			}
			if why != "" {
				free = append(free, fmt.Sprintf("%s:%s (%s)", n.Name, d.ID, why))
				continue
			}
			fit = append(fit, cand{n, d})
		}
	}
	if len(fit) == 0 {
		what := "free drives"
		if spareOnly {
			what = "spares"
		}
		if node != "" || drive != "" {
			what = fmt.Sprintf("free drives matching node %q drive %q", node, drive)
		}
		have := "none"
		if len(free) > 0 {
			have = strings.Join(free, "; ")
		}
		return model.VolumeMember{}, fmt.Errorf("%w: volume %q slot %d: no free drive in a domain that keeps %d+%d with at most %d chunks per domain; %s: %s",
			ErrNoReplacement, vol.Name, slot, vol.K, vol.M, vol.M, what, have)
	}
	rank := func(c cand) int {
		r := 0
		if !c.d.Spare {
			r = 3
		}
		switch {
		case c.n.Name == old.Node:
			return r
		case c.n.Domain == old.Domain:
			return r + 1
		}
		return r + 2
	}
	slices.SortFunc(fit, func(a, b cand) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(inGroup[a.n.Domain], inGroup[b.n.Domain]),
			cmp.Compare(a.n.Name, b.n.Name), cmp.Compare(a.d.ID, b.d.ID))
	})
	c := fit[0]
	return model.VolumeMember{Slot: slot, Node: c.n.Name, Domain: c.n.Domain, Drive: c.d.ID}, nil
}
