package volmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// Cluster mode
//
// In a cluster the desired state is not the local superblock scan but a
// plan the daemon derives from etcd each reconcile (ReconcileCluster): the
// volumes this node owns with their members' current device paths (the
// importer resolves them by member UUID), the hosts allowed on the volume
// exports, the export addresses and every ready volume to consume. The
// claimed drives are never scanned for volumes then, so a node holding a
// few members of a volume owned elsewhere never assembles it.

// Volume states of a cluster plan (the volume record in etcd).
const (
	PlanCreating = "creating" // the owner formats the members
	PlanReady    = "ready"    // the owner runs the engine
)

// DefaultClusterExportPort is the TCP port of the volume exports on the
// storage addresses.
const DefaultClusterExportPort = 4420

// ClusterPlan is what the daemon hands the Manager each reconcile in a
// cluster.
type ClusterPlan struct {
	// Volumes are the volumes this node owns.
	Volumes []PlannedVolume
	// Hosts are allowed on every volume export: every node's host NQN
	// with its DH-HMAC-CHAP secret.
	Hosts []ExportHost
	// Attached restricts the export of each volume with an attach list
	// to the host NQNs here (plan.AttachedHosts; a subset of Hosts). A
	// volume absent from it admits every host.
	Attached map[[16]byte][]string
	// Auth: the kernel's nvmet has DH-HMAC-CHAP; the hosts get their keys.
	// Without it every export of this node (drive and volume exports
	// alike) allows its hosts by host NQN alone: ReconcileCluster warns
	// once per export set and Info says so (ExportAuth).
	Auth bool
	// Refused is why this node exports nothing (exporter.Refusal:
	// require_auth and no DH-HMAC-CHAP); "": it exports. Set, no volume
	// is exported (the volume exports there were are removed; the daemon
	// has this node hold no owner key then) and the consumer connections
	// are made as always; Info says ExportAuthRefused.
	Refused string
	// Addresses are this node's storage addresses (one export port each).
	Addresses []string
	Port      int // default DefaultClusterExportPort
	// CntlIDMin..CntlIDMax are the controller ids this node's volume
	// exports hand out (CntlIDRange of the node's index); 0 and 0: the
	// target's default.
	CntlIDMin, CntlIDMax uint16
	// Consumers are the volumes this node connects to (every ready
	// volume, at its owner's addresses).
	Consumers []Consumer
	// Secret is this host's DH-HMAC-CHAP secret for the consumer
	// connections; empty: none.
	Secret nvmf.SecretText
	// CtrlSecret is this node's DH-HMAC-CHAP controller secret: with
	// Auth, every allowed host with a key gets it as its controller key
	// (WithCtrlKey), the same key the drive exporter puts on the same
	// host entries. Empty: none.
	CtrlSecret nvmf.SecretText
	// TLS is what the volume ports offer: the drive ports' decision
	// (fabrictls.Target; PortsOptional, PortsRequired, or PortsPlain "").
	// With TLS the pair key of each export and admitted host with a
	// secret goes into the .nvme keyring first (tls.go).
	TLS string
	// Stop are the volumes this node must not run (it does not hold
	// their owner key): an engine of one is unexported and stopped.
	Stop [][16]byte
	// Drain are the volumes this node hands over (drain.go): their
	// engine (frozen) is neither started nor stopped and their export
	// stays linked with its ANA state inaccessible, so consumers queue
	// their I/O until the new owner's path is live.
	Drain [][16]byte
}

// PlannedVolume is one volume this node owns.
type PlannedVolume struct {
	UUID  [16]byte
	Name  string
	State string // PlanCreating or PlanReady
	// Members is the device of every member slot in slot order; "" is a
	// member not found now.
	Members []string
	// Config is the geometry to create (state creating): K, M, Groups,
	// ChunkSize, JournalBytes, Domains (placement's), MemberSize. Name and UUID are
	// taken from the fields above.
	Config engine.Config
	// Force creates over members that carry a filesystem or another
	// volume's superblock.
	Force bool
	// OwnerDomain is this node's failure domain: the engine journals
	// the data chunks on the members there (engine.Options.OwnerDomain,
	// owner-domain journaling), so a new owner repairs the stripes this
	// node was writing when it died with them. "": off.
	OwnerDomain string
	// Epoch is the owner epoch this node holds the volume at (the create
	// revision of its owner key, package owner): the engine assembles
	// with it (engine.Options.Epoch), and a running engine at another
	// epoch is frozen and thawed at it. Only volumes whose key the node
	// holds are planned; 0 only in tests and the one-node mode.
	Epoch uint64
	// Gone are the member slots on nodes that are dead (no alive key) or
	// cannot serve this owner yet (plan.View.MemberGone): the start gate
	// does not wait for them (a takeover starts degraded at once instead
	// of after assembly_timeout).
	Gone []int
}

// ExportHost is a host allowed on the volume exports.
type ExportHost struct {
	NQN    string
	Secret nvmf.SecretText // DHHC-1 form; empty: none
}

// Consumer is a volume to connect to.
type Consumer struct {
	UUID      [16]byte
	Addresses []string // the owner's storage addresses
	Port      int      // default DefaultClusterExportPort
	// CtrlSecret is the owner's DH-HMAC-CHAP controller secret: set (and
	// this host has a secret), the connections authenticate the
	// controller too (dhchap_ctrl_secret). Empty: the host alone.
	CtrlSecret nvmf.SecretText
	// TLS connects with TLS 1.3 and the pair's PSK (fabrictls.PairKey of
	// ClusterPlan.Secret); the daemon decides it (fabrictls.Host).
	TLS bool
	// Refused, when set, says why no new connection to this volume may
	// be made (a TLS decision): an existing controller is kept.
	Refused string
}

// ClusterResult is what a cluster reconcile reports back for etcd.
type ClusterResult struct {
	// Created maps every volume of state creating whose members all hold
	// its superblock now (created by this or an earlier reconcile) to
	// its member UUIDs in slot order.
	Created map[[16]byte][][16]byte
	// Retry: a consumer connection failed (an owner not exporting yet,
	// after a takeover); reconcile again soon.
	Retry bool
	// Paths are this host's controllers of every consumed volume after
	// the reconcile (what the old owner of a move waits for).
	Paths map[[16]byte][]ConsumerPath
}

// ReconcileCluster converges the node to plan p: volumes in state creating
// are formatted (refused over a drive that carries data, unless Force) and
// reported in the result; ready volumes get a running engine from the
// members found (degraded when some are missing, not at all while a group
// has fewer than K: the volume's error says which are missing); exports
// allow every host of the plan on every storage address; the node
// connects to every consumer volume. Errors of one volume do not stop the
// others. The plan replaces the local superblock scan until the Manager
// is done.
func (m *Manager) ReconcileCluster(ctx context.Context, p ClusterPlan) (ClusterResult, error) {
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.Lock()
	m.plan = &p
	m.mu.Unlock()
	m.warnUnauthenticated(&p)
	res := ClusterResult{Created: map[[16]byte][][16]byte{}}
	errs := m.stopFrozen(ctx, &p)
	for _, v := range p.Volumes {
		if v.State != PlanCreating {
			continue
		}
		members, err := m.createPlanned(v)
		if err != nil {
			errs = append(errs, err)
			m.mu.Lock()
			m.names[v.UUID], m.errs[v.UUID] = v.Name, err
			m.mu.Unlock()
			continue
		}
		res.Created[v.UUID] = members
	}
	if err := m.reconcileLocked(ctx, nil); err != nil {
		res.Retry = errors.Is(err, errConnect)
		errs = append(errs, err)
	}
	errs = append(errs, m.stopReleased(&p)...)
	res.Paths = m.consumerPaths(p.Consumers)
	return res, errors.Join(errs...)
}

// exportAuth is api.Volume.ExportAuth under plan p ("" without a plan).
func exportAuth(p *ClusterPlan) string {
	switch {
	case p == nil:
		return ""
	case p.Refused != "":
		return api.ExportAuthRefused
	case p.Auth:
		return api.ExportAuthDHCHAP
	}
	return api.ExportAuthHostNQN
}

// warnUnauthenticated logs that this node's exports allow their hosts by
// host NQN alone when the target has no DH-HMAC-CHAP: once per set of
// owned volumes and allowed hosts, not every reconcile (the set is the
// same for many reconciles). The caller holds op.
func (m *Manager) warnUnauthenticated(p *ClusterPlan) {
	if p.Auth || p.Refused != "" { // refused: the daemon logs that, and nothing is exported
		m.unauthWarned = ""
		return
	}
	vols := make([]string, 0, len(p.Volumes))
	for _, v := range p.Volumes {
		vols = append(vols, v.Name)
	}
	hosts := make([]string, 0, len(p.Hosts))
	for _, h := range p.Hosts {
		hosts = append(hosts, h.NQN)
	}
	slices.Sort(vols)
	slices.Sort(hosts)
	key := "volumes " + strings.Join(vols, ",") + "; hosts " + strings.Join(hosts, ",")
	if key == m.unauthWarned {
		return
	}
	m.unauthWarned = key
	m.log.Warn("exports unauthenticated: the NVMe target has no DH-HMAC-CHAP (kernel nvmet without CONFIG_NVME_TARGET_AUTH, or a target plugin without it), "+
		"so this node's drive and volume exports allow their hosts by host NQN alone; fabraid doctor says how to fix it",
		"volumes", vols, "hosts", len(hosts))
}

// currentPlan is the last cluster plan; nil in the one-node mode.
func (m *Manager) currentPlan() *ClusterPlan {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plan
}

// volumes is what the node's volumes are now: the cluster plan's, or the
// local superblock scan's in the one-node mode.
func (m *Manager) volumes() (map[[16]byte]*onDisk, error) {
	if p := m.currentPlan(); p != nil {
		return m.planVolumes(p), nil
	}
	return m.scan()
}

// HostIdentity is the node's NVMe host NQN and id.
func (m *Manager) HostIdentity() nvmf.HostIdentity { return m.x.id }

// Head returns the consumer device (NVMe multipath head) of volume u on
// this node, "" when it has none.
func (m *Manager) Head(u [16]byte) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.heads[u]
}

// createPlanned formats v's members unless they hold v already, and
// returns its member UUIDs in slot order.
func (m *Manager) createPlanned(v PlannedVolume) ([][16]byte, error) {
	if i := slices.Index(v.Members, ""); i >= 0 {
		return nil, fmt.Errorf("volume %s: create: member slot %d (domain %s) not reachable yet", v.Name, i, domainOf(v.Config, i))
	}
	if ms, ok := createdMembers(v); ok {
		return ms, nil
	}
	for i, p := range v.Members {
		if why := dataOn(p, v.UUID); why != "" && !v.Force {
			return nil, fmt.Errorf("%w: volume %s: create: member slot %d (%s): %s; not formatted (force to overwrite)", ErrInvalid, v.Name, i, p, why)
		}
	}
	var devs []engine.Member
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	for _, p := range v.Members {
		fm, err := openMember(p, m.log)
		if err != nil {
			return nil, fmt.Errorf("volume %s: create: %w", v.Name, err)
		}
		devs = append(devs, fm)
	}
	cfg := v.Config
	cfg.Name, cfg.UUID = v.Name, v.UUID
	if cfg.RegionSize == 0 {
		cfg.RegionSize = regionSize(cfg.MemberSize)
	}
	if cfg.CTime == 0 {
		cfg.CTime = time.Now().Unix()
	}
	exec := newExecutor(m.log)
	defer closeExecutor(exec)
	vol, err := engine.Create(cfg, devs, v.Members, engine.Options{Logger: m.log, Executor: exec, OwnerDomain: v.OwnerDomain})
	if err != nil {
		return nil, fmt.Errorf("create volume %s: %w", v.Name, err)
	}
	if err := vol.Close(); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", v.Name, err)
	}
	out, ok := createdMembers(v)
	if !ok {
		return nil, fmt.Errorf("create volume %s: a member does not read back its superblock", v.Name)
	}
	m.log.Info("volume created", "volume", v.Name, "uuid", volid.Format(v.UUID), "k", cfg.K, "m", cfg.M, "members", v.Members)
	return out, nil
}

func domainOf(c engine.Config, slot int) string {
	if slot < len(c.Domains) {
		return c.Domains[slot]
	}
	return "?"
}

// createdMembers returns v's member UUIDs when every member device holds
// v's superblock in its own slot (a create that finished before).
func createdMembers(v PlannedVolume) ([][16]byte, bool) {
	out := make([][16]byte, len(v.Members))
	for i, p := range v.Members {
		sb := readSuperblock(p)
		if sb == nil || sb.VolumeUUID != v.UUID || sb.Slot != i {
			return nil, false
		}
		out[i] = sb.MemberUUID
	}
	return out, true
}

func readSuperblock(path string) *superblock.Superblock {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	sb, err := superblock.ReadCopies(f)
	if err != nil {
		return nil
	}
	return sb
}

// dataOn says what on the device at path a create would destroy: a
// filesystem, partition table or RAID signature (internal/drive's check
// at claim time), or another volume's superblock. "" when nothing, or
// only volume u's own superblock (a create interrupted before).
func dataOn(path string, u [16]byte) string {
	if sb := readSuperblock(path); sb != nil {
		if sb.VolumeUUID == u {
			return ""
		}
		return fmt.Sprintf("holds member %d of fabraid volume %s (%s)", sb.Slot, sb.Name, volid.Format(sb.VolumeUUID))
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("cannot be read: %v", err)
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		return fmt.Sprintf("cannot be read: %v", err)
	}
	var what []string
	for _, s := range drive.Detect(f, size) {
		d := s.Type
		if s.Detail != "" {
			d = s.Detail
		}
		what = append(what, fmt.Sprintf("%s signature at byte %d", d, s.Offset))
	}
	return strings.Join(what, ", ")
}

// planVolumes is the cluster counterpart of scan: the ready volumes of
// the plan, grouped from the superblocks on their members' devices as the
// scan groups claimed drives (same newest-view rules, so failed and
// returning members are found the same way).
func (m *Manager) planVolumes(p *ClusterPlan) map[[16]byte]*onDisk {
	out := map[[16]byte]*onDisk{}
	for _, v := range p.Volumes {
		if v.State != PlanReady {
			continue
		}
		var found []scanned
		for _, p := range v.Members {
			if p == "" {
				continue
			}
			if sb := readSuperblock(p); sb != nil && sb.VolumeUUID == v.UUID {
				found = append(found, scanned{p, sb})
			}
		}
		d := groupVolumes(found)[v.UUID]
		if d == nil {
			d = &onDisk{uuid: v.UUID, failed: map[int]string{}, returning: map[int]bool{}}
		}
		d.name, d.ownerDomain, d.epoch = v.Name, v.OwnerDomain, v.Epoch
		d.gone = map[int]bool{}
		for _, s := range v.Gone {
			d.gone[s] = true
		}
		out[v.UUID] = d
	}
	return out
}

// ClusterExportSpec is the desired state of the volume exports in a
// cluster: one export per volume (as ExportSpec), allowed to every host of
// hosts (with its key when auth), listening on every address (nvmet port
// ids ExportPortID, ExportPortID+1, ...). Pure.
func ClusterExportSpec(exports []Export, hosts []ExportHost, auth bool, addrs []string, port int) []backend.Export {
	if len(hosts) == 0 {
		return nil
	}
	if port == 0 {
		port = DefaultClusterExportPort
	}
	var hs []backend.Host
	for _, h := range hosts {
		bh := backend.Host{NQN: h.NQN}
		if auth {
			bh.DHCHAPKey = backend.Secret(h.Secret.Reveal())
		}
		hs = append(hs, bh)
	}
	slices.SortFunc(hs, func(a, b backend.Host) int { return strings.Compare(a.NQN, b.NQN) })
	var ls []backend.Listener
	for i, a := range addrs {
		ls = append(ls, backend.Listener{Transport: "tcp", Address: a, ServiceID: strconv.Itoa(port), PortID: uint16(ExportPortID + i)})
	}
	out := ExportSpec(exports, "", "", port)
	for i := range out {
		out[i].Hosts = admitted(hs, exportOf(exports, out[i].NQN).Hosts)
		out[i].Listeners = slices.Clone(ls)
		for j := range out[i].Listeners {
			out[i].Listeners[j].ANAStates = exportOf(exports, out[i].NQN).anaStates()
		}
	}
	return out
}

// admitted returns the hosts of hs whose NQN is in only; nil only: all.
func admitted(hs []backend.Host, only []string) []backend.Host {
	out := slices.Clone(hs)
	if only == nil {
		return out
	}
	return slices.DeleteFunc(out, func(h backend.Host) bool { return !slices.Contains(only, h.NQN) })
}

// WithCtrlKey gives every host of exports that has a DH-HMAC-CHAP key
// the controller key ctrl (this node's controller secret), so hosts that
// ask for bidirectional authentication can check this target. Empty
// ctrl: exports unchanged. Pure (exports' hosts are modified in place).
func WithCtrlKey(exports []backend.Export, ctrl nvmf.SecretText) []backend.Export {
	if ctrl == "" {
		return exports
	}
	for i := range exports {
		for j := range exports[i].Hosts {
			if h := &exports[i].Hosts[j]; h.DHCHAPKey != "" {
				h.DHCHAPCtrlKey = backend.Secret(ctrl.Reveal())
			}
		}
	}
	return exports
}

// ConsumerConnections are the connections of this host to the consumer
// volumes: one per owner address (paths of one multipath head),
// volume-path timeout profile, with the host's secret and TLS as each
// consumer says; none to a refused consumer. Pure.
func ConsumerConnections(cs []Consumer, id nvmf.HostIdentity, secret nvmf.SecretText) ([]nvmf.Options, error) {
	t, err := nvmf.Profile(nvmf.ProfileVolumePath)
	if err != nil {
		return nil, err
	}
	var out []nvmf.Options
	for _, c := range cs {
		if c.Refused != "" {
			continue
		}
		port := c.Port
		if port == 0 {
			port = DefaultClusterExportPort
		}
		for _, a := range c.Addresses {
			out = append(out, nvmf.Options{Transport: nvmf.TCP, Address: a, ServiceID: strconv.Itoa(port),
				NQN: volid.NQN(c.UUID), HostNQN: id.NQN, HostID: id.ID, Timeouts: &t, DHCHAPSecret: secret.Reveal(), TLS: c.TLS})
			if secret != "" {
				out[len(out)-1].DHCHAPCtrlSecret = c.CtrlSecret.Reveal()
			}
		}
	}
	return out, nil
}

// DeletePlanned destroys volume u of the cluster plan: with a running
// engine as Delete does (refused while this node's consumer device is
// open); without one (it never started) the metadata of the member
// devices given that still carry u's superblock is wiped.
func (m *Manager) DeletePlanned(ctx context.Context, u [16]byte, members []string) error {
	if _, e, _ := m.resolve(volid.Format(u)); e != nil {
		return m.Delete(ctx, volid.Format(u))
	}
	m.op.Lock()
	defer m.op.Unlock()
	var errs []error
	for _, p := range members {
		if sb := readSuperblock(p); p != "" && sb != nil && sb.VolumeUUID == u {
			if err := wipeMeta(p); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: wipe %s: %w", volid.Format(u), p, err))
			}
		}
	}
	m.mu.Lock()
	delete(m.names, u)
	delete(m.errs, u)
	m.mu.Unlock()
	os.Remove(m.recordPath(u))
	return errors.Join(errs...)
}

// minRegions is how many write-intent regions a member has at least: a
// member returning after a short absence resyncs only the regions written
// meanwhile, so regions as large as the member would make every return a
// full rebuild.
const minRegions = 64

// regionSize is the bitmap region size for members of size bytes: the
// engine's default, or for small members the largest power of two (at
// least 1 MiB) that gives minRegions regions.
func regionSize(size int64) int64 {
	r := int64(engine.DefaultRegionSize)
	for r > 1<<20 && size > 0 && size/r < minRegions {
		r /= 2
	}
	return r
}
