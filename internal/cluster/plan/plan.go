// Package plan adapts the cluster's records (a View read from etcd: the
// nodes with their liveness, the volume records, the host keys) to the
// plain inputs of the data-plane packages: placement nodes with their free
// drives, a new volume record from a placement, this node's drive exports
// (package exporter), the member imports of the volumes this node owns
// (package importer), and the volumes every node consumes. It is pure: no
// etcd, no kernel; the daemon reads the View and applies the results.
//
// # Invariants
//
//   - A drive is free exactly when its node is alive, it is claimed (in
//     the node's registry record) and no volume record, in any state,
//     lists it as a member. A dead node offers no drives, but its members
//     stay in their volumes (they are wanted back).
//   - Members are keyed by (node, drive id); drive ids are unique in the
//     cluster (internal/drive), so the exporter's member lists use ids.
//   - A member is found by its member UUID once the record has one; before
//     that (state creating) a remote member is the head of its drive
//     export's controller and a local one its claimed device.
//   - A node imports and assembles a volume only while it holds the
//     volume's owner key (View.Held), never because the record names it
//     as owner: the record's owner is the desired owner, the key is the
//     running one (docs/cluster.md, "Failover").
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/placement"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// View is the cluster as one node sees it at one moment.
type View struct {
	Self     string                     // this node's name
	Nodes    []model.NodeStatus         // the registry with liveness (registry.List)
	Volumes  []model.Volume             // every volume record (volumes.List)
	HostKeys map[string]nvmf.SecretText // node -> DH-HMAC-CHAP secret (volumes.HostKeys)
	// CtrlKeys: node -> its DH-HMAC-CHAP controller secret
	// (volumes.AllNodeKeys), what its nvmet presents to the hosts; a node
	// without one is not asked to prove itself (bidirectional
	// authentication off towards it).
	CtrlKeys map[string]nvmf.SecretText
	// Held are the volumes this node runs: volume UUID -> the epoch of
	// the owner key it holds on its current owner lease, once the
	// storage fence for that epoch is acknowledged (the daemon's owner
	// session). Only these are imported and assembled here.
	Held map[string]uint64
	// Unfenced: held volume UUID -> member nodes whose owner session
	// lapsed and whose drive exporter has not acknowledged the volume's
	// epoch. Their members cannot be imported before that exporter
	// re-points them, so for that volume they count as gone (MemberGone)
	// although their alive key may outlast their owner key.
	Unfenced map[string][]string
}

// MemberGone says whether vol's members on node are neither waited for
// nor newly connected to: the node is dead or unknown, or Unfenced for
// vol.
func (v View) MemberGone(vol model.Volume, node string) bool {
	n, ok := v.node(node)
	return !ok || !n.Alive || slices.Contains(v.Unfenced[vol.UUID], node)
}

func (v View) node(name string) (model.NodeStatus, bool) {
	for _, n := range v.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return model.NodeStatus{}, false
}

// used is the set of (node, drive) pairs that are members of any volume.
func (v View) used() map[[2]string]bool {
	u := map[[2]string]bool{}
	for _, vol := range v.Volumes {
		for _, m := range vol.Members {
			u[[2]string{m.Node, m.Drive}] = true
		}
	}
	return u
}

// PlacementNodes returns the alive nodes that can export (not
// model.Node.CannotExport: such a node's drives could serve no other
// owner and it could serve the volume to nobody) with their free drives
// (spares left out: new volumes never take them) and the number of
// volumes each owns, by name.
func PlacementNodes(v View) []placement.Node { return placementNodes(v, false) }

// placementNodes is PlacementNodes, with the free spares too (marked
// Spare) when spares.
func placementNodes(v View, spares bool) []placement.Node {
	used := v.used()
	owned := map[string]int{}
	for _, vol := range v.Volumes {
		if vol.Owner != "" {
			owned[vol.Owner]++
		}
	}
	var out []placement.Node
	for _, n := range v.Nodes {
		if !n.Alive || n.CannotExport() {
			continue
		}
		pn := placement.Node{Name: n.Name, Domain: n.Domain, Owned: owned[n.Name], NoOwner: n.Drained}
		for _, d := range n.Drives {
			if !used[[2]string{n.Name, d.ID}] && (spares || !d.Spare) {
				pn.Free = append(pn.Free, placement.Drive{ID: d.ID, Serial: d.Serial, Size: d.Size, Spare: d.Spare})
			}
		}
		out = append(out, pn)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NewVolume places a new volume over v's free drives and returns its
// record in state creating (ChunkSize 0: the engine's default; the
// caller may set it). A name that a record of v holds already is refused
// here; volumes.Create is the authority (two nodes may place at once).
func NewVolume(v View, req placement.Request, uuid [16]byte, now time.Time) (model.Volume, error) {
	for _, vol := range v.Volumes {
		if vol.Name == req.Name {
			return model.Volume{}, fmt.Errorf("volume %q exists (%s, owner %s)", req.Name, vol.UUID, vol.Owner)
		}
	}
	for _, name := range req.Nodes {
		if n, ok := v.node(name); ok && !n.Alive {
			return model.Volume{}, fmt.Errorf("%w: volume %q: node %s is dead (--nodes)", placement.ErrNoPlacement, req.Name, name)
		} else if ok && n.CannotExport() {
			return model.Volume{}, fmt.Errorf("%w: volume %q: node %s exports nothing (--nodes): %s", placement.ErrNoPlacement, req.Name, name, n.ExportsWhy)
		}
	}
	p, err := placement.Place(PlacementNodes(v), req)
	if err != nil {
		var out []string
		for _, n := range v.Nodes {
			if n.Alive && n.CannotExport() {
				out = append(out, n.Name)
			}
		}
		if len(out) > 0 && errors.Is(err, placement.ErrNoPlacement) {
			err = fmt.Errorf("%w (left out: %s, which export nothing: require_auth and no DH-HMAC-CHAP in their target; fabraid cluster status says why)", err, strings.Join(out, ", "))
		}
		return model.Volume{}, err
	}
	rec := model.Volume{
		Version: model.VolumeVersion, UUID: volid.Format(uuid), Name: p.Name, K: p.K, M: p.M, Groups: p.Groups,
		Owner: p.Owner, State: model.VolumeCreating, MemberSize: p.MemberSize, Created: now.UTC(),
	}
	for _, m := range p.Members {
		rec.Members = append(rec.Members, model.VolumeMember{Node: m.Node, Domain: m.Domain, Drive: m.DriveID})
	}
	rec.FixedParity = ownerParityOrder(rec.Members, rec.K+rec.M, rec.Owner)
	for i := range rec.Members {
		rec.Members[i].Slot = i
	}
	return rec, nil
}

// ownerParityOrder moves the members on owner to the end of their group
// (width members each, order otherwise kept), onto the parity slots of
// the owner-parity layout, and reports whether the owner holds any: then
// the volume uses that layout. Placement puts at most M of a group on
// one node, so they all land on parity slots.
func ownerParityOrder(ms []model.VolumeMember, width int, owner string) bool {
	any := false
	for g := 0; g+width <= len(ms); g += width {
		grp := ms[g : g+width]
		slices.SortStableFunc(grp, func(a, b model.VolumeMember) int {
			return cmp.Compare(b2i(a.Node == owner), b2i(b.Node == owner))
		})
		any = any || grp[width-1].Node == owner
	}
	return any
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// host is node name's host NQN and secret; zero when the node is not in
// the registry (then nobody is allowed).
func (v View) host(name string) exporter.Host {
	n, ok := v.node(name)
	if !ok || name == "" {
		return exporter.Host{}
	}
	return exporter.Host{NQN: n.HostNQN, Secret: v.HostKeys[name]}
}

// ExporterInput is this node's drive exports: every volume with a member
// on this node, each to its owner (any state: a volume being created or
// deleted needs its members too). drives are this node's claimed drives
// with their current device paths; the host NQN and the addresses are
// this node's registry record's.
func ExporterInput(v View, drives []exporter.Drive) exporter.Input {
	self, _ := v.node(v.Self)
	in := exporter.Input{HostNQN: self.HostNQN, Drives: drives, Addresses: self.StorageAddresses, CtrlSecret: v.CtrlKeys[v.Self]}
	for _, vol := range v.Volumes {
		if !slices.ContainsFunc(vol.Members, func(m model.VolumeMember) bool { return m.Node == v.Self }) {
			continue
		}
		ev := exporter.Volume{UUID: vol.UUID, Owner: v.host(vol.Owner)}
		for _, m := range vol.Members {
			ev.Members = append(ev.Members, m.Drive)
		}
		in.Volumes = append(in.Volumes, ev)
	}
	return in
}

// Slot is where the owner finds one member.
type Slot struct {
	model.VolumeMember
	// Member is the member UUID; Known is false before the owner has
	// formatted the member (state creating, or a bad UUID in the record).
	Member [16]byte
	Known  bool
	// Remote is the member's drive export NQN when the drive is on
	// another node; Local its device on this node (from local); both
	// empty when this node has no path for it (its drive is not claimed
	// here any more).
	Remote string
	Local  string
}

// Owned is one volume this node owns.
type Owned struct {
	Volume model.Volume
	UUID   [16]byte
	Slots  []Slot // slot order
}

// Import is the owner's import plan: the importer's input for all the
// volumes this node owns together, and the volumes slot by slot.
type Import struct {
	Input   importer.Input
	Volumes []Owned
}

// ImporterInput plans the imports of the volumes this node holds the
// owner key of (View.Held). Remote
// members are imported from their node's first storage address (one path
// per member drive) at exporter.NQN(drive id); local members are opened at
// local[claim id]. id is this host's identity; the secret is this node's
// host key from the View. Members that are gone (MemberGone: dead or
// unfenced nodes) are still wanted: a member that comes back is found
// again by its UUID; their existing connections are kept, no new one is
// made (importer.Remote.KeepOnly).
func ImporterInput(v View, id nvmf.HostIdentity, local map[string]string) Import {
	imp := Import{Input: importer.Input{Identity: id, Secret: v.HostKeys[v.Self]}}
	seen := map[string]bool{}
	for _, vol := range v.Volumes {
		if _, held := v.Held[vol.UUID]; !held {
			continue
		}
		u, err := volid.ParseUUID(vol.UUID)
		if err != nil {
			continue // volumes.DecodeVolume refuses such records
		}
		o := Owned{Volume: vol, UUID: u}
		for _, m := range vol.Members {
			s := Slot{VolumeMember: m}
			if m.UUID != "" {
				if mu, err := volid.ParseUUID(m.UUID); err == nil {
					s.Member, s.Known = mu, true
					imp.Input.Members = append(imp.Input.Members, mu)
				}
			}
			if m.Node == v.Self {
				s.Local = local[m.Drive]
				if s.Local != "" && !seen[s.Local] {
					seen[s.Local] = true
					imp.Input.Local = append(imp.Input.Local, s.Local)
				}
			} else if n, ok := v.node(m.Node); ok && len(n.StorageAddresses) > 0 {
				s.Remote = exporter.NQN(m.Drive)
				if !seen[s.Remote] {
					seen[s.Remote] = true
					imp.Input.Remotes = append(imp.Input.Remotes, importer.Remote{NQN: s.Remote, Address: n.StorageAddresses[0], KeepOnly: v.MemberGone(vol, m.Node),
						CtrlSecret: v.CtrlKeys[m.Node], Node: m.Node})
				}
			}
			o.Slots = append(o.Slots, s)
		}
		imp.Volumes = append(imp.Volumes, o)
	}
	return imp
}

// Paths maps each owned volume's slots to the devices of an importer
// result, in slot order; "" is a member not found now. A member with a
// known UUID is wherever the importer found that UUID (local or remote,
// whatever its device is called now); one without (state creating) is
// the head of its export's controller, or its local device.
func (imp Import) Paths(r importer.Result) map[[16]byte][]string {
	heads := map[string]string{}
	for _, d := range r.Devices {
		if d.Remote != "" {
			heads[d.Remote] = d.Path
		}
	}
	out := map[[16]byte][]string{}
	for _, o := range imp.Volumes {
		paths := make([]string, len(o.Slots))
		for i, s := range o.Slots {
			switch {
			case s.Known:
				paths[i] = r.Paths[s.Member]
			case s.Remote != "":
				paths[i] = heads[s.Remote]
			default:
				paths[i] = s.Local
			}
		}
		out[o.UUID] = paths
	}
	return out
}

// Consumer is one volume every node connects to.
type Consumer struct {
	UUID      [16]byte
	Name      string
	NQN       string   // volid.NQN(UUID)
	Owner     string   // node name
	Addresses []string // the owner's storage addresses
}

// Consumers lists every ready volume with an owner in the registry, by
// name: the volume export's NQN at the owner's storage addresses (the
// port is the volume manager's). A volume without an owner (a failover
// in progress) or whose owner has no storage address is left out.
func Consumers(v View) []Consumer {
	return consumers(v, func(model.Volume) bool { return true })
}

// ConsumedBy is Consumers restricted to the volumes attached to node
// (model.Volume.AttachedTo): the connections node makes.
func ConsumedBy(v View, node string) []Consumer {
	return consumers(v, func(vol model.Volume) bool { return vol.AttachedTo(node) })
}

// consumers is Consumers of the volumes keep accepts.
func consumers(v View, keep func(model.Volume) bool) []Consumer {
	var out []Consumer
	for _, vol := range v.Volumes {
		if vol.State != model.VolumeReady || vol.Owner == "" || !keep(vol) {
			continue
		}
		n, ok := v.node(vol.Owner)
		u, err := volid.ParseUUID(vol.UUID)
		if !ok || len(n.StorageAddresses) == 0 || err != nil {
			continue
		}
		out = append(out, Consumer{UUID: u, Name: vol.Name, NQN: volid.NQN(u), Owner: vol.Owner, Addresses: slices.Clone(n.StorageAddresses)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// AttachedHosts maps each volume with an attach list to the host NQNs of
// its attached nodes that the view knows: the hosts its export admits. A
// volume without an attach list is absent (every node's host).
func AttachedHosts(v View) map[[16]byte][]string {
	out := map[[16]byte][]string{}
	for _, vol := range v.Volumes {
		u, err := volid.ParseUUID(vol.UUID)
		if vol.Attach == nil || err != nil {
			continue
		}
		hosts := []string{}
		for _, name := range vol.Attach.Nodes {
			if n, ok := v.node(name); ok && n.HostNQN != "" {
				hosts = append(hosts, n.HostNQN)
			}
		}
		out[u] = hosts
	}
	return out
}

// ChooseOwner is the node that takes volume vol over when its owner is
// gone: the same answer on every node that reads the same View. The
// candidates are the alive nodes with a storage address that can export
// (model.Node.CannotExport: it could serve the volume to nobody) other
// than vol's record owner; among them it prefers a node with no member of vol
// (its loss would not take members with it: the owner's write hole),
// then the one that owns the fewest other volumes (by record), then the
// smallest name. "" when there is no candidate.
func ChooseOwner(v View, vol model.Volume) string {
	owned := map[string]int{}
	for _, o := range v.Volumes {
		if o.UUID != vol.UUID && o.Owner != "" {
			owned[o.Owner]++
		}
	}
	hasMember := func(n string) int {
		if slices.ContainsFunc(vol.Members, func(m model.VolumeMember) bool { return m.Node == n }) {
			return 1
		}
		return 0
	}
	best := ""
	for _, n := range v.Nodes {
		if !n.MayOwn() || n.Name == vol.Owner || len(n.StorageAddresses) == 0 {
			continue
		}
		if best == "" {
			best = n.Name
			continue
		}
		a, b := []int{hasMember(n.Name), owned[n.Name]}, []int{hasMember(best), owned[best]}
		if c := slices.Compare(a, b); c < 0 || c == 0 && n.Name < best {
			best = n.Name
		}
	}
	return best
}
