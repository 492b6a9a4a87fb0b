package volmgr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/plugins/backend"
)

// ANA groups and states of the volume exports (docs/cluster.md, "Planned
// move"; docs/nvmeof.md, "Switchover").
//
// nvmet keeps an ANA state per (port, group), and all of a node's volumes
// share its export ports, so every volume a node exports gets a group of
// its own there: setting one volume inaccessible on this node touches no
// other volume. Group 1 always exists (the kernel's default, optimized)
// and is never given to a volume; groups 2..128 are (NVMET_MAX_ANAGRPS),
// so at most 127 volumes per node have their own group. Groups are local
// to a node: a Linux host keeps a group id per path (the same volume may
// be group 2 on one owner and group 7 on the next; measured in
// TestIntegrationANASwitchover).
const (
	firstVolumeANAGroup = 2
	maxANAGroup         = 128
)

// ANA states a volume export can be set to (configfs spelling).
const (
	ANAOptimized    = "optimized"
	ANANonOptimized = "non-optimized"
	ANAInaccessible = "inaccessible"
)

// ErrNotExported is returned by SetANAState for a volume this node does
// not export.
var ErrNotExported = errors.New("volume not exported on this node")

// AssignANAGroups gives every NQN in nqns an ANA group in 2..128: the
// group it has in prev (the actual exports) when that is in range and not
// taken by another NQN of nqns, else the lowest free one. NQNs left over
// when all 127 groups are taken get 0 (the shared group 1). Pure; the
// result depends on nqns as a set and on prev.
func AssignANAGroups(nqns []string, prev map[string]uint32) map[string]uint32 {
	sorted := slices.Sorted(slices.Values(nqns))
	sorted = slices.Compact(sorted)
	out := make(map[string]uint32, len(sorted))
	used := map[uint32]bool{}
	for _, n := range sorted {
		if g := prev[n]; g >= firstVolumeANAGroup && g <= maxANAGroup && !used[g] {
			out[n] = g
			used[g] = true
		}
	}
	next := uint32(firstVolumeANAGroup)
	for _, n := range sorted {
		if _, ok := out[n]; ok {
			continue
		}
		for next <= maxANAGroup && used[next] {
			next++
		}
		if next > maxANAGroup {
			out[n] = 0
			continue
		}
		out[n] = next
		used[next] = true
	}
	return out
}

// cntlIDBlock is how many controller ids each node hands out for its
// volume exports; blocks 1..65 are disjoint and below 0xffef.
const (
	cntlIDBlock  = 1000
	cntlIDBlocks = 65
)

// CntlIDRange is the controller id range of the volume exports of the
// node holding controller-ID block b (model.Node.CntlIDBlock, claimed
// once in etcd and never moved). A Linux host refuses a second
// controller of one NQN with a controller id it already has, and nvmet
// hands out ids from one allocator per node, so without disjoint ranges
// a new owner's first controller can collide with the old owner's
// reconnecting one. Blocks b and b+65 share a range (a collision is then
// possible, not certain). Block 0 (none claimed yet) is 0, 0: the
// kernel's whole range for new exports, existing ones keep theirs.
func CntlIDRange(b int) (lo, hi uint16) {
	if b <= 0 {
		return 0, 0
	}
	i := (b - 1) % cntlIDBlocks
	return uint16(i*cntlIDBlock + 1), uint16((i + 1) * cntlIDBlock)
}

// anaStates is the listener ANA state map of an export.
func (e Export) anaStates() map[uint32]string {
	if e.ANAGroup == 0 || e.ANAState == "" {
		return nil
	}
	return map[uint32]string{e.ANAGroup: e.ANAState}
}

// exportOf returns the export of nqn in exports (zero if none).
func exportOf(exports []Export, nqn string) Export {
	for _, e := range exports {
		if volid.NQN(e.UUID) == nqn {
			return e
		}
	}
	return Export{}
}

// withANA returns exports with their ANA groups (kept from the actual
// exports, read once from the backend), their states (inaccessible for
// the volumes of drain and for frozen engines, else SetANAState's, else
// optimized), and this node's controller id range when the backend
// applies ranges.
func (x *exporter) withANA(ctx context.Context, exports []Export, lo, hi uint16, drain [][16]byte) ([]Export, error) {
	x.anaMu.Lock()
	defer x.anaMu.Unlock()
	x.drain = map[[16]byte]bool{}
	for _, u := range drain {
		x.drain[u] = true
	}
	if x.ranges == nil {
		f, err := x.target.Features(ctx)
		if err != nil {
			return nil, fmt.Errorf("target features: %w", err)
		}
		x.ranges = &f.CntlIDRange
	}
	if !*x.ranges {
		// SPDK: no controller id ranges (docs/cluster.md, "Planned move").
		lo, hi = 0, 0
	}
	if x.groups == nil {
		actual, err := x.target.List(ctx, volid.NQNPrefix)
		if err != nil {
			return nil, fmt.Errorf("list exports for their ANA groups: %w", err)
		}
		x.groups = map[string]uint32{}
		for _, e := range actual {
			if len(e.Namespaces) > 0 && e.Namespaces[0].ANAGroup > 1 {
				x.groups[e.NQN] = e.Namespaces[0].ANAGroup
			}
		}
	}
	var nqns []string
	for _, e := range exports {
		nqns = append(nqns, volid.NQN(e.UUID))
	}
	x.groups = AssignANAGroups(nqns, x.groups)
	out := slices.Clone(exports)
	for i := range out {
		out[i].CntlIDMin, out[i].CntlIDMax = lo, hi
		out[i].ANAGroup = x.groups[volid.NQN(out[i].UUID)]
		if out[i].ANAGroup == 0 {
			continue
		}
		out[i].ANAState = ANAOptimized
		if st, ok := x.ana[out[i].UUID]; ok {
			out[i].ANAState = st
		}
		if x.drain[out[i].UUID] || out[i].Frozen {
			// Never usable while draining or frozen: the hosts queue
			// their I/O (or send it to another owner's path) instead
			// of waiting on a request the engine holds.
			out[i].ANAState = ANAInaccessible
		}
	}
	for u := range x.ana {
		if _, ok := x.groups[volid.NQN(u)]; !ok {
			delete(x.ana, u) // no longer exported: a new export starts optimized
		}
	}
	return out, nil
}

// SetANAState sets the ANA state of this node's export of volume u on
// every export address, now (through the target backend) and in every
// later reconcile. State is ANAOptimized, ANANonOptimized or
// ANAInaccessible. ErrNotExported when the node does not export u; a
// volume without a group of its own (more than 127 on this node) is
// refused rather than changing the shared group 1.
func (m *Manager) SetANAState(ctx context.Context, u [16]byte, state string) error {
	switch state {
	case ANAOptimized, ANANonOptimized, ANAInaccessible:
	default:
		return fmt.Errorf("ANA state %q: want %s, %s or %s", state, ANAOptimized, ANANonOptimized, ANAInaccessible)
	}
	plan := m.currentPlan()
	if plan == nil {
		return fmt.Errorf("volume %s: ANA states are set in a cluster only", volid.Format(u))
	}
	x := m.x
	x.anaMu.Lock()
	g, ok := x.groups[volid.NQN(u)]
	if ok && g != 0 {
		if x.ana == nil {
			x.ana = map[[16]byte]string{}
		}
		x.ana[u] = state
	}
	x.anaMu.Unlock()
	if !ok {
		return fmt.Errorf("volume %s: %w", volid.Format(u), ErrNotExported)
	}
	if g == 0 {
		return fmt.Errorf("volume %s: no ANA group of its own on this node (more than %d volumes exported): its state cannot be set alone", volid.Format(u), maxANAGroup-1)
	}
	return x.setANANow(ctx, plan, u, g, state)
}

// setANANow sets group g of this node's export of volume u to state on
// every export address of plan, through the target backend only (a later
// reconcile applies what withANA says).
func (x *exporter) setANANow(ctx context.Context, plan *ClusterPlan, u [16]byte, g uint32, state string) error {
	port := plan.Port
	if port == 0 {
		port = DefaultClusterExportPort
	}
	var errs []error
	for _, a := range plan.Addresses {
		err := x.target.SetANAState(ctx, backend.ANARequest{NQN: volid.NQN(u), Group: g, State: state,
			Listener: backend.Listener{Transport: "tcp", Address: a, ServiceID: strconv.Itoa(port)}})
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s at %s: set ANA group %d %s: %w", volid.Format(u), a, g, state, err))
		}
	}
	return errors.Join(errs...)
}

// fencedInaccessible turns the exports of the volumes us inaccessible now
// (their engines just froze: the owner's self-fence), so that the hosts
// stop sending requests the frozen engines would hold. It returns, for
// each volume exported here with a group of its own, nil when its export
// is inaccessible on every export address, else why not; other volumes
// are left alone and out of the result.
func (m *Manager) fencedInaccessible(ctx context.Context, us [][16]byte) map[[16]byte]error {
	plan := m.currentPlan()
	if plan == nil {
		return nil
	}
	x := m.x
	out := map[[16]byte]error{}
	for _, u := range us {
		x.anaMu.Lock()
		g := x.groups[volid.NQN(u)]
		x.anaMu.Unlock()
		if g == 0 {
			continue
		}
		out[u] = x.setANANow(ctx, plan, u, g, ANAInaccessible)
	}
	return out
}
