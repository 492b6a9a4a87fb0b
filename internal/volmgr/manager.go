package volmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/kernel/ublk"
	"github.com/fabraid/fabraid/plugins/backend"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"

	"github.com/fabraid/fabraid/internal/durable"
)

// EngineSpec is what an engine needs to start: the volume and its members.
type EngineSpec struct {
	UUID    [16]byte
	Name    string
	Members []string // member device paths (current view only)
	UblkID  int      // device to re-attach or create; ublk.AnyID: any
	// OwnerDomain is engine.Options.OwnerDomain: this node's failure
	// domain for a cluster volume (owner-domain journaling), "" otherwise.
	OwnerDomain string
	// Epoch is engine.Options.Epoch: the owner epoch the node holds the
	// volume at (cluster mode); 0 in the one-node mode (one more than on
	// disk).
	Epoch uint64
	// NoZeroCopy keeps the ublk copy path where the kernel offers zero
	// copy (config ublk_zero_copy = off; ServeOptions.NoZeroCopy).
	NoZeroCopy bool
	// RebuildBusyRate is engine.RebuildOptions.BusyRate for the engine's
	// background tasks (config rebuild_busy_rate; 0: none).
	RebuildBusyRate int64
}

// StartFunc starts the engine of a volume.
type StartFunc func(ctx context.Context, s EngineSpec) (Engine, error)

// Options configure a Manager.
type Options struct {
	Config    config.Config
	Drives    drive.Host
	NvmetRoot string // default nvmet.DefaultRoot
	// Target is the target backend the volumes are exported through
	// (plugins/backend: a plugin's Runner); default the in-process kernel
	// nvmet backend on NvmetRoot.
	Target  backend.Backend
	HostDir string // default nvmf.DefaultHostDir (hostnqn, hostid)
	Sysfs   string // default nvmf.DefaultSysfs
	Log     *slog.Logger
	// Start starts an engine; default StartInProcess.
	Start StartFunc
	// Owner, when set (cluster mode), says whether this node owns volume
	// u; reconcile starts engines only of volumes it owns, and waits when
	// Owner errs (gate.go). Nil: this node owns every volume it finds.
	Owner func(u [16]byte) (bool, error)
	// Kick, when set, asks for a reconcile soon: the start gate calls it
	// (from a timer) when a waiting volume's decision may change.
	Kick func()
}

// StartInProcess assembles the volume from its members and serves it in this
// process (Local).
func StartInProcess(log *slog.Logger) StartFunc {
	return func(_ context.Context, s EngineSpec) (Engine, error) {
		exec := newExecutor(log)
		vol, err := assemble(s.Members, s.OwnerDomain, s.Epoch, exec, log)
		if err != nil {
			closeExecutor(exec)
			return nil, fmt.Errorf("assemble volume %s: %w", s.Name, err)
		}
		l, err := StartLocal(vol, s.UblkID, log, LocalOptions{Executor: exec})
		if err != nil {
			vol.Close()
			closeExecutor(exec)
			return nil, err
		}
		return l, nil
	}
}

// Manager manages the node's volumes. Its methods are safe for concurrent
// use; operations that change the set of volumes are serialised.
type Manager struct {
	opts Options
	log  *slog.Logger
	x    *exporter

	op sync.Mutex // serialises Reconcile, Create, Delete

	mu      sync.Mutex
	engines map[[16]byte]Engine
	names   map[[16]byte]string
	errs    map[[16]byte]error
	heads   map[[16]byte]string // consumer device

	gate gate // boot-time start gate (gate.go)

	// plan is the cluster's desired state (ReconcileCluster); nil in
	// the one-node mode. Guarded by mu.
	plan *ClusterPlan
	// unauthWarned is the export set (volumes and hosts) the last
	// "exports unauthenticated" warning was about; "" after a plan with
	// Auth. Guarded by op (warnUnauthenticated).
	unauthWarned string
}

// New returns a Manager; it loads (or creates, like nvme-cli) the host
// identity but touches nothing else until Reconcile.
func New(o Options) (*Manager, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.NvmetRoot == "" {
		o.NvmetRoot = nvmet.DefaultRoot
	}
	if o.HostDir == "" {
		o.HostDir = nvmf.DefaultHostDir
	}
	if o.Sysfs == "" {
		o.Sysfs = nvmf.DefaultSysfs
	}
	if o.Start == nil {
		o.Start = StartInProcess(o.Log)
	}
	id, err := nvmf.LoadHostIdentity(o.HostDir)
	if err != nil {
		return nil, fmt.Errorf("host identity: %w", err)
	}
	// The volume manager applies only scope volid.NQNPrefix (kernel nvmet: vol:
	// subsystems and ports 18000-18099), so a drive exporter reconciling
	// drive: subsystems on the same node (the cluster layer) and this one
	// never undo each other.
	if o.Target == nil {
		o.Target = &pnvmet.Backend{Root: o.NvmetRoot, SysModule: "/sys/module"}
	}
	return &Manager{
		opts: o, log: o.Log,
		x: &exporter{target: o.Target, host: nvmf.NewHost(), sysfs: nvmf.Sysfs{Root: o.Sysfs}, id: id,
			addr: o.Config.ExportAddress, port: o.Config.ExportPort},
		engines: map[[16]byte]Engine{}, names: map[[16]byte]string{}, errs: map[[16]byte]error{}, heads: map[[16]byte]string{},
	}, nil
}

// HostNQN returns the node's host NQN (the only host allowed on exports).
func (m *Manager) HostNQN() string { return m.x.id.NQN }

// onDisk is one volume as the claimed drives' superblocks describe it.
type onDisk struct {
	uuid    [16]byte
	name    string
	members []string // paths of members in the newest view
	// failed maps a slot the newest view records as failed to the drive
	// still holding that member, kept for a re-add. Such a drive is no
	// member, unless the slot failed only by being missing (returning):
	// then it is also in members, and an assembly takes it back by itself.
	failed map[int]string
	// returning are the slots of failed holds failed as missing: a
	// running engine re-adds them (Reconcile).
	returning map[int]bool
	// present are the slots of the newest view whose drive was found.
	present map[int]bool
	sb      *superblock.Superblock
	// ownerDomain is the plan's PlannedVolume.OwnerDomain (cluster mode).
	ownerDomain string
	// epoch is the plan's PlannedVolume.Epoch (cluster mode).
	epoch uint64
	// gone are the plan's PlannedVolume.Gone slots (cluster mode).
	gone map[int]bool
}

// scanned is a claimed drive and the superblock read from it.
type scanned struct {
	path string
	sb   *superblock.Superblock
}

// scan reads the superblocks of the claimed drives and groups them by
// volume (groupVolumes).
func (m *Manager) scan() (map[[16]byte]*onDisk, error) {
	ds, err := m.opts.Drives.ClaimedDrives()
	if err != nil {
		return nil, err
	}
	var found []scanned
	for _, d := range ds {
		f, err := os.Open(d.Path)
		if err != nil {
			continue
		}
		sb, err := superblock.ReadCopies(f)
		f.Close()
		if err != nil {
			continue // blank claimed drive
		}
		found = append(found, scanned{d.Path, sb})
	}
	return groupVolumes(found), nil
}

// groupVolumes groups scanned drives by volume. The newest view
// (superblock.Newer) decides: only drives whose member UUID is in its
// member table are members (a drive replaced out of a volume keeps an old
// superblock and is ignored), and a drive of a slot it records as failed
// by request, on an I/O error or for an unrecorded reason is no member
// either: such a member returns only by an explicit re-add. A drive of a
// slot failed as missing (absent at an assembly) or unreachable (its path
// was lost while the engine ran) is a member again, as
// engine.PlanAssembly takes it back (a resync of the bitmap's regions).
func groupVolumes(found []scanned) map[[16]byte]*onDisk {
	by := map[[16]byte][]scanned{}
	for _, c := range found {
		by[c.sb.VolumeUUID] = append(by[c.sb.VolumeUUID], c)
	}
	out := map[[16]byte]*onDisk{}
	for u, cs := range by {
		newest := cs[0].sb
		for _, c := range cs[1:] {
			if superblock.Newer(c.sb, newest) {
				newest = c.sb
			}
		}
		v := &onDisk{uuid: u, name: newest.Name, sb: newest, failed: map[int]string{}, returning: map[int]bool{}, present: map[int]bool{}}
		for _, c := range cs {
			if c.sb.Slot >= len(newest.Members) || newest.Members[c.sb.Slot].UUID != c.sb.MemberUUID {
				continue
			}
			v.present[c.sb.Slot] = true
			if m := newest.Members[c.sb.Slot]; m.Role == superblock.RoleFailed {
				v.failed[c.sb.Slot] = c.path
				if !m.Failure.Returns() {
					continue
				}
				v.returning[c.sb.Slot] = true
			}
			v.members = append(v.members, c.path)
		}
		out[u] = v
	}
	return out
}

// record is the per-volume state file: the ublk device id to re-attach.
type record struct {
	UUID   string `json:"uuid"`
	Name   string `json:"name"`
	UblkID int    `json:"ublk_id"`
}

func (m *Manager) recordPath(u [16]byte) string {
	return filepath.Join(m.opts.Config.StateDir, "volumes", volid.Format(u)+".json")
}

func (m *Manager) loadRecord(u [16]byte) record {
	r := record{UblkID: ublk.AnyID}
	if b, err := os.ReadFile(m.recordPath(u)); err == nil {
		json.Unmarshal(b, &r)
	}
	return r
}

func (m *Manager) saveRecord(r record, u [16]byte) error {
	p := m.recordPath(u)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	return durable.WriteFile(p, b, 0o600)
}

// Reconcile converges the node: every volume found on the claimed drives has
// a running engine, an nvmet export and a connection. Errors of one volume
// do not stop the others; they are reported in Info and returned joined.
func (m *Manager) Reconcile(ctx context.Context) error {
	m.op.Lock()
	defer m.op.Unlock()
	return m.reconcileLocked(ctx, nil)
}

func (m *Manager) reconcileLocked(ctx context.Context, skip map[[16]byte]bool) error {
	plan := m.currentPlan()
	vols, err := m.volumes()
	if err != nil {
		return err
	}
	errs := m.startEngines(ctx, vols, skip)
	exports, xerrs := m.desiredExports(vols, skip)
	errs = append(errs, xerrs...)
	var heads map[string]string
	consumed := map[[16]byte]bool{}
	if plan != nil {
		p := *plan
		p.Consumers = slices.DeleteFunc(slices.Clone(p.Consumers), func(c Consumer) bool { return skip[c.UUID] })
		for _, c := range p.Consumers {
			consumed[c.UUID] = true
		}
		heads, err = m.x.reconcileCluster(ctx, exports, &p)
	} else {
		for _, e := range exports {
			consumed[e.UUID] = true
		}
		heads, err = m.x.reconcile(ctx, exports)
	}
	if err != nil {
		errs = append(errs, err)
	}
	m.mu.Lock()
	clear(m.heads)
	for u := range consumed {
		if h := heads[volid.NQN(u)]; h != "" {
			m.heads[u] = h
		}
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}

// resyncReturning starts the resync of an engine just started from v when
// its assembly took members back that were missing or unreachable (they
// are rebuilding), as a re-add would: only the regions written while they
// were away.
func (m *Manager) resyncReturning(e Engine, st EngineStatus, v *onDisk) error {
	if len(v.returning) == 0 || st.Task != "" {
		return nil
	}
	for _, ms := range st.Engine.Members {
		if ms.Role == superblock.RoleRebuilding && v.returning[ms.Slot] {
			m.log.Info("members that were away are back; resyncing them", "volume", v.name)
			if err := e.Rebuild(0); err != nil && !errors.Is(err, ErrBusy) {
				return fmt.Errorf("volume %s: resync returning members: %w", v.name, err)
			}
			return nil
		}
	}
	return nil
}

// reAddReturning re-adds, through the same path as "volume re-add", every
// member the running engine reports failed as missing or unreachable
// (superblock.FailReason.Returns) whose drive the scan found again (a drive
// that appeared after the engine started without it, or a remote drive
// whose path is back): only the regions written while it was away are
// resynced. Members failed by request or on an I/O error are left alone.
// Every returning member is re-added in the same reconcile: each re-add
// stops the rebuild the one before started, and the last rebuild covers
// them all in one pass (Local.ReAdd). A re-add refused because a scrub
// runs (or by an engine that predates that) is retried by a later
// reconcile.
func (m *Manager) reAddReturning(e Engine, st EngineStatus, v *onDisk) error {
	var errs []error
	for _, ms := range st.Engine.Members {
		if ms.Role != superblock.RoleFailed || !ms.Failure.Returns() || !v.returning[ms.Slot] {
			continue
		}
		path := v.failed[ms.Slot]
		m.log.Info("member is back; re-adding it", "volume", v.name, "slot", ms.Slot, "failed", ms.Failure, "drive", path)
		if err := e.ReAdd(ms.Slot, path, 0); err != nil {
			if errors.Is(err, ErrBusy) {
				return nil
			}
			errs = append(errs, fmt.Errorf("volume %s: re-add returning member of slot %d from %s: %w", v.name, ms.Slot, path, err))
		}
	}
	return errors.Join(errs...)
}

// desiredExports returns the export of every volume (on disk or with an
// engine) that has a ublk device: the device its engine reports, or, while the engine does not
// answer or failed to start (it is being restarted by the daemon or by
// systemd), the device recorded for the volume if it still exists. A
// quiesced ublk device waits for its next engine (user recovery), so its
// export and the consumers' NVMe path must stay: tearing them down would
// turn an engine restart into I/O errors and a new consumer device.
func (m *Manager) desiredExports(vols map[[16]byte]*onDisk, skip map[[16]byte]bool) ([]Export, []error) {
	var exports []Export
	var errs []error
	ids := map[[16]byte]bool{}
	m.mu.Lock()
	for u := range m.engines {
		ids[u] = true
	}
	m.mu.Unlock()
	for u := range vols {
		ids[u] = true
	}
	plan := m.currentPlan()
	for u := range ids {
		if skip[u] || plan.stopped(u) {
			continue
		}
		m.mu.Lock()
		e, name := m.engines[u], m.names[u]
		m.mu.Unlock()
		if e != nil {
			st, err := e.Status()
			if err == nil {
				exports = append(exports, Export{UUID: u, Device: st.UblkPath, Frozen: st.Frozen})
				continue
			}
			errs = append(errs, fmt.Errorf("volume %s: %w", name, err))
		}
		if dev := m.recordedDevice(u); dev != "" {
			exports = append(exports, Export{UUID: u, Device: dev})
		}
	}
	return exports, errs
}

// recordedDevice returns /dev/ublkbN of the volume's recorded ublk device
// when that block device exists, else "".
func (m *Manager) recordedDevice(u [16]byte) string {
	rec := m.loadRecord(u)
	if rec.UblkID < 0 {
		return ""
	}
	dev := fmt.Sprintf("/dev/ublkb%d", rec.UblkID)
	if _, err := os.Stat(dev); err != nil {
		return ""
	}
	return dev
}

// ErrInvalid is wrapped by errors in a request (bad name, geometry, drives).
var ErrInvalid = errors.New("invalid request")

// ErrNotFound is returned for an unknown volume.
var ErrNotFound = errors.New("no such volume")

// ErrInUse is returned when deleting a volume whose device is open.
var ErrInUse = errors.New("volume in use")

// freeDrives returns the claimed drives that are no volume's member.
func (m *Manager) freeDrives(vols map[[16]byte]*onDisk) ([]drive.Drive, error) {
	ds, err := m.opts.Drives.ClaimedDrives()
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, v := range vols {
		for _, p := range v.members {
			used[p] = true
		}
		// A failed member's drive is kept for its re-add: it may hold
		// the only other copy of what the volume lost.
		for _, p := range v.failed {
			used[p] = true
		}
	}
	for _, e := range m.engineSnapshot() {
		if st, err := e.Status(); err == nil {
			for _, ms := range st.Engine.Members {
				used[ms.Device] = true
			}
		}
	}
	var out []drive.Drive
	for _, d := range ds {
		if !used[d.Path] {
			out = append(out, d)
		}
	}
	return out, nil
}

func pickDrives(free []drive.Drive, want []string, n int) ([]string, error) {
	if len(want) == 0 {
		if len(free) < n {
			return nil, fmt.Errorf("need %d claimed, unused drives, have %d (fabraid drive claim ...)", n, len(free))
		}
		var out []string
		for _, d := range free[:n] {
			out = append(out, d.Path)
		}
		return out, nil
	}
	if len(want) != n {
		return nil, fmt.Errorf("--drives lists %d drives, K+M is %d", len(want), n)
	}
	var out []string
	for _, w := range want {
		i := slices.IndexFunc(free, func(d drive.Drive) bool { return d.Path == w || d.ID == w || d.Name == w })
		if i < 0 {
			return nil, fmt.Errorf("drive %s is not claimed or already a volume member", w)
		}
		if slices.Contains(out, free[i].Path) {
			return nil, fmt.Errorf("drive %s listed twice", w)
		}
		out = append(out, free[i].Path)
	}
	return out, nil
}

// Create creates a volume on claimed drives, then starts, exports and
// connects it (Reconcile).
func (m *Manager) Create(ctx context.Context, r api.CreateRequest) (api.Volume, error) {
	m.op.Lock()
	defer m.op.Unlock()
	if err := volid.CheckNewName(r.Name); err != nil {
		return api.Volume{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	vols, err := m.scan()
	if err != nil {
		return api.Volume{}, err
	}
	for _, v := range vols {
		if v.name == r.Name {
			return api.Volume{}, fmt.Errorf("%w: volume %s already exists (%s)", ErrInvalid, r.Name, volid.Format(v.uuid))
		}
	}
	if r.K < 2 || r.M < 1 || r.M > 4 {
		return api.Volume{}, fmt.Errorf("%w: volume %s: want --data >= 2 and --parity 1..4, got %d+%d", ErrInvalid, r.Name, r.K, r.M)
	}
	free, err := m.freeDrives(vols)
	if err != nil {
		return api.Volume{}, err
	}
	paths, err := pickDrives(free, r.Drives, r.K+r.M)
	if err != nil {
		return api.Volume{}, fmt.Errorf("%w: volume %s: %w", ErrInvalid, r.Name, err)
	}
	var devs []engine.Member
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	domains := make([]string, len(paths))
	for i, p := range paths {
		fm, err := openMember(p, m.log)
		if err != nil {
			return api.Volume{}, fmt.Errorf("volume %s: %w", r.Name, err)
		}
		devs = append(devs, fm)
		domains[i] = m.opts.Config.NodeName
	}
	if err := checkJournal(r, devs); err != nil {
		return api.Volume{}, err
	}
	cfg := engine.Config{Name: r.Name, K: r.K, M: r.M, ChunkSize: r.ChunkSize, JournalBytes: r.JournalBytes, Domains: domains,
		// One node: every member is in this node's domain. The cluster
		// layer spreads members over nodes.
		AllowDomainViolation: true, CTime: time.Now().Unix()}
	exec := newExecutor(m.log)
	defer closeExecutor(exec)
	vol, err := engine.Create(cfg, devs, paths, engine.Options{Logger: m.log, Executor: exec})
	if err != nil {
		return api.Volume{}, fmt.Errorf("create volume %s: %w", r.Name, err)
	}
	u := vol.UUID()
	if err := vol.Close(); err != nil {
		return api.Volume{}, fmt.Errorf("create volume %s: %w", r.Name, err)
	}
	m.log.Info("volume created", "volume", r.Name, "uuid", volid.Format(u), "k", r.K, "m", r.M, "members", paths)
	if err := m.reconcileLocked(ctx, nil); err != nil {
		return api.Volume{}, err
	}
	return m.Info(volid.Format(u))
}

// resolve finds a known volume by name or UUID.
func (m *Manager) resolve(ref string) ([16]byte, Engine, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for u, n := range m.names {
		if n == ref || volid.Format(u) == ref {
			e := m.engines[u]
			if e == nil {
				err := m.errs[u]
				if err == nil {
					err = errors.New("not running")
				}
				return u, nil, fmt.Errorf("volume %s: %w", ref, err)
			}
			return u, e, nil
		}
	}
	return [16]byte{}, nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
}

// Fail marks member slot of volume ref failed by administrator request.
// Unless force, a fail that would lose a group is refused before anything
// changes.
func (m *Manager) Fail(ref string, slot int, force bool) error {
	_, e, err := m.resolve(ref)
	if err != nil {
		return err
	}
	return e.Fail(slot, force)
}

// ReAdd brings failed member slot of volume ref back from the claimed drive
// that still holds it and starts the rebuild of what it missed (the
// regions written since it failed; everything after an I/O error).
func (m *Manager) ReAdd(ref string, slot int, rate int64) error {
	u, e, err := m.resolve(ref)
	if err != nil {
		return err
	}
	vols, err := m.volumes()
	if err != nil {
		return err
	}
	v := vols[u]
	if v == nil || v.failed[slot] == "" {
		return fmt.Errorf("%w: volume %s: re-add: no claimed drive holds the failed member of slot %d (fabraid volume replace puts a new drive there)",
			ErrInvalid, ref, slot)
	}
	return e.ReAdd(slot, v.failed[slot], rate)
}

// Replace puts claimed, unused drive dev into failed slot and starts the
// rebuild.
func (m *Manager) Replace(ref string, slot int, dev string, rate int64) error {
	_, e, err := m.resolve(ref)
	if err != nil {
		return err
	}
	if m.currentPlan() != nil {
		return fmt.Errorf("%w: volume %s: in a cluster the volume record names the new member: the daemon's replace moves it in etcd and the owner calls ReplacePlanned", ErrInvalid, ref)
	}
	vols, err := m.scan()
	if err != nil {
		return err
	}
	free, err := m.freeDrives(vols)
	if err != nil {
		return err
	}
	p, err := pickDrives(free, []string{dev}, 1)
	if err != nil {
		return fmt.Errorf("%w: volume %s: replace: %w", ErrInvalid, ref, err)
	}
	return e.Replace(slot, p[0], rate)
}

// Rebuild starts a rebuild of stale or replaced members.
func (m *Manager) Rebuild(ref string, rate int64) error {
	_, e, err := m.resolve(ref)
	if err != nil {
		return err
	}
	return e.Rebuild(rate)
}

// Scrub starts a parity check.
func (m *Manager) Scrub(ref string, repair bool, rate int64) error {
	_, e, err := m.resolve(ref)
	if err != nil {
		return err
	}
	return e.Scrub(repair, rate)
}

// Delete stops, unexports and destroys volume ref: its members' metadata is
// wiped (they stay claimed). A volume whose device is open is refused.
func (m *Manager) Delete(ctx context.Context, ref string) error {
	m.op.Lock()
	defer m.op.Unlock()
	u, e, err := m.resolve(ref)
	if err != nil {
		return err
	}
	m.mu.Lock()
	head := m.heads[u]
	m.mu.Unlock()
	if head != "" {
		if err := inUse(head); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInUse, ref, err)
		}
	}
	st, err := e.Status()
	if err != nil {
		return err
	}
	if err := m.reconcileLocked(ctx, map[[16]byte]bool{u: true}); err != nil {
		return fmt.Errorf("delete %s: unexport: %w", ref, err)
	}
	if err := e.Stop(); err != nil {
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	m.mu.Lock()
	delete(m.engines, u)
	delete(m.names, u)
	delete(m.errs, u)
	m.mu.Unlock()
	// Wipe the metadata of the members and of every claimed drive that
	// still carries this volume's superblock (members failed and replaced
	// earlier), so no later scan finds a remnant.
	wipe := map[string]bool{}
	for _, ms := range st.Engine.Members {
		if ms.Device != "" {
			wipe[ms.Device] = true
		}
	}
	if ds, err := m.opts.Drives.ClaimedDrives(); err == nil {
		for _, d := range ds {
			if f, err := os.Open(d.Path); err == nil {
				sb, err := superblock.ReadCopies(f)
				f.Close()
				if err == nil && sb.VolumeUUID == u {
					wipe[d.Path] = true
				}
			}
		}
	}
	var errs []error
	for dev := range wipe {
		if err := wipeMeta(dev); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: wipe %s: %w", ref, dev, err))
		}
	}
	os.Remove(m.recordPath(u))
	m.log.Info("volume deleted", "volume", ref)
	return errors.Join(errs...)
}

func wipeMeta(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, superblock.MetaEnd), 0); err != nil {
		return err
	}
	return f.Sync()
}

// Shutdown stops managing the volumes. With stop, every volume is unexported,
// disconnected and stopped cleanly; without, engines are left for user
// recovery by the next daemon (exports and connections stay, I/O pauses).
func (m *Manager) Shutdown(ctx context.Context, stop bool) error {
	m.op.Lock()
	defer m.op.Unlock()
	var errs []error
	if stop {
		if _, err := m.x.reconcile(ctx, nil); err != nil {
			errs = append(errs, err)
		}
	}
	m.mu.Lock()
	engines := m.engines
	m.engines = map[[16]byte]Engine{}
	m.mu.Unlock()
	for _, e := range engines {
		if stop {
			if err := e.Stop(); err != nil {
				errs = append(errs, err)
			}
		} else if l, ok := e.(interface{ Abandon() }); ok {
			l.Abandon()
		}
	}
	return errors.Join(errs...)
}

// inUse reports why the block device dev is in use: mounted or held
// exclusively (O_EXCL open fails), or open in some process (/proc/*/fd).
func inUse(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|os.O_EXCL, 0)
	if err != nil {
		return fmt.Errorf("%s cannot be opened exclusively (mounted or held): %w", dev, err)
	}
	f.Close()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err == nil && l == dev {
				comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
				return fmt.Errorf("%s is open in process %s (%s)", dev, p.Name(), strings.TrimSpace(string(comm)))
			}
		}
	}
	return nil
}

// Forget drops engine e of volume u (it exited); the next Reconcile starts a
// new one, which re-attaches to the volume's ublk device.
func (m *Manager) Forget(u [16]byte, e Engine) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.engines[u] == e {
		delete(m.engines, u)
	}
}

// checkJournal refuses (ErrInvalid) a journal size r cannot have on devs:
// the engine's bounds on the smallest of them.
func checkJournal(r api.CreateRequest, devs []engine.Member) error {
	if r.JournalBytes == 0 {
		return nil
	}
	var size int64
	for _, d := range devs {
		s, err := d.Size()
		if err != nil {
			return fmt.Errorf("volume %s: %w", r.Name, err)
		}
		if size == 0 || s < size {
			size = s
		}
	}
	if err := engine.CheckJournalBytes(engine.Config{K: r.K, M: r.M, ChunkSize: r.ChunkSize, JournalBytes: r.JournalBytes}, size); err != nil {
		return fmt.Errorf("%w: volume %s: %w", ErrInvalid, r.Name, err)
	}
	return nil
}
