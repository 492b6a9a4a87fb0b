package volmgr

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// ExportPortID is the nvmet port id of the node's volume export port.
const ExportPortID = 18000

// Export is one volume to export: its UUID and the ublk block device.
type Export struct {
	UUID   [16]byte
	Device string // /dev/ublkbN
	// ANAGroup is the volume's ANA group on this node's export ports
	// (AssignANAGroups; 0: the shared group 1) and ANAState its state
	// there ("": the backend's default, optimized for group 1).
	ANAGroup uint32
	ANAState string
	// CntlIDMin..CntlIDMax are this node's controller ids
	// (CntlIDRange); 0 and 0: the target's default.
	CntlIDMin, CntlIDMax uint16
	// Frozen: the volume's engine is frozen (self-fence or hand-over);
	// its export is inaccessible until the engine thaws (ana.go).
	Frozen bool
	// Hosts, when not nil, are the host NQNs the cluster export admits
	// (the volume's attach list, ClusterPlan.Attached); nil admits every
	// host of the plan.
	Hosts []string
}

// ExportSpec is the desired state of the node's volume exports, in the
// target backend's terms (plugins/backend, scope volid.NQNPrefix): one export per
// volume (namespace 1 = the ublk device, UUID and NGUID from the volume
// UUID), allowed to hostNQN only, each listening on addr:port (nvmet port
// ExportPortID, shared by all). Sorted by NQN. It is pure.
func ExportSpec(exports []Export, hostNQN, addr string, port int) []backend.Export {
	var out []backend.Export
	for _, e := range exports {
		h := hex.EncodeToString(e.UUID[:])
		out = append(out, backend.Export{
			NQN: volid.NQN(e.UUID), Serial: h[:20], Model: "fabraid volume", CntlIDMin: e.CntlIDMin, CntlIDMax: e.CntlIDMax,
			Namespaces: []backend.Namespace{{NSID: 1, Device: e.Device, UUID: volid.Format(e.UUID), NGUID: h, ANAGroup: e.ANAGroup}},
			Listeners:  []backend.Listener{{Transport: "tcp", Address: addr, ServiceID: strconv.Itoa(port), PortID: ExportPortID, ANAStates: e.anaStates()}},
			Hosts:      []backend.Host{{NQN: hostNQN}},
		})
	}
	slices.SortFunc(out, func(a, b backend.Export) int { return strings.Compare(a.NQN, b.NQN) })
	return out
}

// Connections is the desired set of connections of this node to its own
// exports (volume-path timeout profile).
func Connections(exports []Export, id nvmf.HostIdentity, addr string, port int) ([]nvmf.Options, error) {
	t, err := nvmf.Profile(nvmf.ProfileVolumePath)
	if err != nil {
		return nil, err
	}
	var out []nvmf.Options
	for _, e := range exports {
		out = append(out, nvmf.Options{Transport: nvmf.TCP, Address: addr, ServiceID: strconv.Itoa(port),
			NQN: volid.NQN(e.UUID), HostNQN: id.NQN, HostID: id.ID, Timeouts: &t})
	}
	return out, nil
}

// exporter converges the target's volume exports and the node's own
// connections.
type exporter struct {
	// target is the target backend (plugins/backend): the in-process
	// kernel nvmet backend or a plugin's Runner.
	target backend.Backend
	host   *nvmf.Host
	sysfs  nvmf.Sysfs
	id     nvmf.HostIdentity
	addr   string
	port   int
	// keys receives the volume paths' TLS pair keys (tls.go); nil: the
	// kernel's .nvme keyring.
	keys fabrictls.Keys

	// anaMu guards groups (the ANA group of every exported NQN, ana.go)
	// and ana (SetANAState's state per volume; absent: optimized).
	anaMu  sync.Mutex
	groups map[string]uint32
	ana    map[[16]byte]string
	ranges *bool // the backend applies controller id ranges (read once)
	// drain are the volumes whose export is forced inaccessible
	// (ClusterPlan.Drain); guarded by anaMu.
	drain map[[16]byte]bool

	// lastMu guards what the last converge applied and found: the export
	// spec applied (drain.go; fencestop.go unlinks exports from it) and
	// this host's controllers by subsystem NQN.
	lastMu  sync.Mutex
	applied []backend.Export
	paths   map[string][]ConsumerPath
}

// reconcile converges the exports and connections and returns the consumer
// device (/dev/nvmeXnY) of every exported NQN that has one.
func (x *exporter) reconcile(ctx context.Context, exports []Export) (map[string]string, error) {
	desired, err := Connections(exports, x.id, x.addr, x.port)
	if err != nil {
		return nil, err
	}
	return x.converge(ctx, ExportSpec(exports, x.id.NQN, x.addr, x.port), desired, nil, false)
}

// reconcileCluster is reconcile with the exports and connections of a
// cluster plan; a failed connection (its owner down) is reported and the
// others are made.
func (x *exporter) reconcileCluster(ctx context.Context, exports []Export, p *ClusterPlan) (map[string]string, error) {
	desired, err := ConsumerConnections(p.Consumers, x.id, p.Secret)
	if err != nil {
		return nil, err
	}
	if p.Refused != "" {
		exports = nil // exports nothing: the spec removes what there was
	}
	if exports, err = x.withANA(ctx, exports, p.CntlIDMin, p.CntlIDMax, p.Drain); err != nil {
		return nil, err
	}
	for i := range exports {
		if hosts, ok := p.Attached[exports[i].UUID]; ok {
			exports[i].Hosts = hosts
		}
	}
	spec := WithTLS(WithCtrlKey(ClusterExportSpec(exports, p.Hosts, p.Auth, p.Addresses, p.Port), p.CtrlSecret), p.TLS)
	keys, kerr := x.insertTLSKeys(spec, desired, p) // tls.go: a pair without its key fails its handshake only
	heads, err := x.converge(ctx, spec, desired, refusedNQNs(p.Consumers), true)
	if err == nil {
		err = x.pruneTLSKeys(keys)
	}
	return heads, errors.Join(kerr, err)
}

// converge applies the exports and the desired connections; with
// keepGoing a failed connect is joined into the error after the others
// were tried. Controllers of the subsystems in keep (refused consumers)
// are never disconnected.
func (x *exporter) converge(ctx context.Context, exports []backend.Export, desired []nvmf.Options, keep map[string]bool, keepGoing bool) (map[string]string, error) {
	if _, err := x.target.Apply(ctx, backend.ApplyRequest{Scope: volid.NQNPrefix, Exports: exports}); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	ctrls, err := x.sysfs.Controllers()
	if err != nil {
		return nil, fmt.Errorf("list controllers: %w", err)
	}
	x.noteExported(exports)
	plan := nvmf.PlanConnections(desired, ctrls, volid.NQNPrefix)
	plan.Disconnect = keepControllers(plan.Disconnect, ctrls, keep)
	var later []string // old paths of desired subsystems (paths.go)
	if keepGoing {
		plan.Disconnect, later = splitOldPaths(plan.Disconnect, desired, ctrls)
	}
	for _, name := range plan.Disconnect {
		if err := x.host.Disconnect(name); err != nil {
			return nil, fmt.Errorf("disconnect %s: %w", name, err)
		}
	}
	for _, r := range plan.Retime {
		if err := x.host.SetTimeouts(r.Name, r.Timeouts); err != nil {
			return nil, fmt.Errorf("retime %s: %w", r.Name, err)
		}
	}
	var failed []error
	for _, r := range plan.Rekey { // a rotated key: re-authenticate
		if err := x.host.Rekey(r.Name, r.Attr, r.Secret); err != nil {
			if !keepGoing {
				return nil, err
			}
			failed = append(failed, err)
		}
	}
	for _, o := range plan.Connect {
		if err := x.connect(ctx, o); err != nil {
			if !keepGoing {
				return nil, err
			}
			failed = append(failed, fmt.Errorf("%w: %w", errConnect, err))
		}
	}
	ctrls, err = x.sysfs.Controllers()
	if err != nil {
		return nil, fmt.Errorf("list controllers: %w", err)
	}
	if drop := oldPathsToDrop(later, desired, ctrls); len(drop) > 0 {
		for _, name := range drop {
			if err := x.host.Disconnect(name); err != nil {
				failed = append(failed, fmt.Errorf("disconnect old path %s: %w", name, err))
			}
		}
		if ctrls, err = x.sysfs.Controllers(); err != nil {
			return nil, fmt.Errorf("list controllers: %w", err)
		}
	}
	x.notePaths(ctrls)
	heads := map[string]string{}
	for _, c := range ctrls {
		if len(c.Paths) > 0 && c.Paths[0].Head != "" {
			heads[c.SubsystemNQN] = "/dev/" + c.Paths[0].Head
		}
	}
	return heads, errors.Join(failed...)
}

func (x *exporter) connect(ctx context.Context, o nvmf.Options) error {
	c, err := x.host.Connect(o)
	if err != nil {
		return fmt.Errorf("connect %s at %s: %w", o.NQN, o.Address, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := x.host.WaitPaths(wctx, c.Name, 1); err != nil {
		return fmt.Errorf("connect %s at %s: wait for namespace: %w", o.NQN, o.Address, err)
	}
	return nil
}
