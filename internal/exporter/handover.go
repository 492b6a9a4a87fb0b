package exporter

import (
	"slices"
	"strings"

	"github.com/fabraid/fabraid/kernel/nvmet"
)

// A planned move's target imports the members before it holds the owner
// key (docs/cluster.md, "Planned move"): while the key's holder still
// serves, each member drive is exported to the holder and to the target
// (Volume.Prepared). That is safe because the target writes nothing
// before it holds the key and the storage fence at that epoch is
// acknowledged: until then its importer only reads superblocks.
//
// When the key changes hands the old holder must lose its controllers,
// and nvmet ends controllers only by unlinking a subsystem from a port,
// which ends every host's, the target's prepared ones too. An old holder
// that disconnected its own imports after its engine froze and flushed
// (Volume.Released, the move record's Released) has none left to end:
// it is only dropped from the allowed hosts, so it cannot connect again.
// Every other host that loses access is fenced as before (Fence).

// desireHandover is Desire with each volume's Prepared host allowed too:
// a second Desire over the volumes with a prepared host, as if that host
// owned them, merged into the first.
func desireHandover(in Input, f nvmet.Features) Desired {
	d := Desire(in, f)
	prep := in
	prep.Volumes = nil
	for _, v := range in.Volumes {
		if v.Prepared.NQN != "" && v.Prepared.NQN != v.Owner.NQN {
			v.Owner = v.Prepared
			prep.Volumes = append(prep.Volumes, v)
		}
	}
	if d.Refused != nil || len(prep.Volumes) == 0 {
		return d
	}
	return mergeDesired(d, Desire(prep, f))
}

// mergeDesired is a with b's hosts, subsystems, allowed hosts and port
// links added; subsystems and port links sorted by NQN as Desire's.
func mergeDesired(a, b Desired) Desired {
	out := a
	out.Spec.Hosts = slices.Clone(a.Spec.Hosts)
	for _, h := range b.Spec.Hosts {
		if !slices.ContainsFunc(out.Spec.Hosts, func(x nvmet.Host) bool { return x.NQN == h.NQN }) {
			out.Spec.Hosts = append(out.Spec.Hosts, h)
		}
	}
	out.Spec.Subsystems = slices.Clone(a.Spec.Subsystems)
	for _, s := range b.Spec.Subsystems {
		i := slices.IndexFunc(out.Spec.Subsystems, func(x nvmet.Subsystem) bool { return x.NQN == s.NQN })
		if i < 0 {
			out.Spec.Subsystems = append(out.Spec.Subsystems, s)
			continue
		}
		c := out.Spec.Subsystems[i]
		c.AllowedHosts = append(slices.Clone(c.AllowedHosts), s.AllowedHosts...)
		out.Spec.Subsystems[i] = c
	}
	slices.SortFunc(out.Spec.Subsystems, func(x, y nvmet.Subsystem) int { return strings.Compare(x.NQN, y.NQN) })
	out.Spec.Ports = nil
	for _, p := range append(slices.Clone(a.Spec.Ports), b.Spec.Ports...) {
		i := slices.IndexFunc(out.Spec.Ports, func(x nvmet.Port) bool { return x.ID == p.ID })
		if i < 0 {
			p.Subsystems = slices.Clone(p.Subsystems)
			out.Spec.Ports = append(out.Spec.Ports, p)
			continue
		}
		for _, n := range p.Subsystems {
			if !slices.Contains(out.Spec.Ports[i].Subsystems, n) {
				out.Spec.Ports[i].Subsystems = append(out.Spec.Ports[i].Subsystems, n)
			}
		}
		slices.Sort(out.Spec.Ports[i].Subsystems)
	}
	out.Exports = append(slices.Clone(a.Exports), b.Exports...)
	out.Problems = append(slices.Clone(a.Problems), b.Problems...)
	out.Keys = append(slices.Clone(a.Keys), b.Keys...)
	return out
}

// withoutReleased is actual with each volume's Released host taken out
// of the allowed hosts of that volume's drive subsystems, for Fence: a
// released host that loses access needs no teardown (it has no
// controller left), so it alone makes no subsystem stale. The state
// applied is still compared with the target's real one, which drops the
// host from the allowed hosts.
func withoutReleased(actual nvmet.State, in Input) nvmet.State {
	released := map[string]string{}
	for _, v := range in.Volumes {
		if v.Released == "" || v.Released == v.Owner.NQN || v.Released == v.Prepared.NQN {
			continue
		}
		for _, id := range v.Members {
			released[NQN(id)] = v.Released
		}
	}
	if len(released) == 0 {
		return actual
	}
	out := actual
	out.Subsystems = slices.Clone(actual.Subsystems)
	for i, s := range out.Subsystems {
		if h, ok := released[s.NQN]; ok && slices.Contains(s.AllowedHosts, h) {
			out.Subsystems[i].AllowedHosts = slices.DeleteFunc(slices.Clone(s.AllowedHosts), func(x string) bool { return x == h })
		}
	}
	return out
}
