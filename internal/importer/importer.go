package importer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Remote is one drive export of another node.
type Remote struct {
	NQN       string // exporter.NQN(drive id)
	Address   string // the exporting node's storage address
	ServiceID string // exporter.DefaultServiceID unless configured
	// KeepOnly: the exporting node is dead, or its owner session lapsed
	// and its exporter has not re-pointed the drive to this node
	// (plan.View.MemberGone); an existing controller is kept (it
	// reconnects when the node is back) but no new one is connected (a
	// connect to a dead address blocks for the TCP SYN retries, minutes,
	// and would hold up a takeover).
	KeepOnly bool
	// CtrlSecret is the exporting node's DH-HMAC-CHAP controller secret
	// (DHHC-1 form): with Input.Secret set, the connection authenticates
	// the controller too (dhchap_ctrl_secret) and the kernel refuses a
	// target that cannot answer with it. Empty: the host alone
	// authenticates.
	CtrlSecret nvmf.SecretText
	// Node is the exporting node's name (for the caller's decisions and
	// messages).
	Node string
	// TLS connects with TLS 1.3 and the pair's PSK (fabrictls.PairKey of
	// Input.Secret, put into the .nvme keyring first); the caller decides
	// it (fabrictls.Host).
	TLS bool
	// Refused, when set, says why no new connection to this export may
	// be made (a TLS decision, fabrictls.Host): like KeepOnly, an
	// existing controller is kept.
	Refused string
}

// Input is everything the owner node wants imported, for all the volumes
// it owns together.
type Input struct {
	Identity nvmf.HostIdentity // this host's NQN and id
	// Secret is this host's DH-HMAC-CHAP secret (DHHC-1 form); empty:
	// connect without authentication.
	Secret  nvmf.SecretText
	Members [][16]byte // wanted member UUIDs
	Remotes []Remote   // exports to connect
	Local   []string   // local block devices that may hold members
}

// Device is one candidate block device and what its superblock says.
type Device struct {
	Path   string // /dev/nvme3n1, /dev/vdb, ...
	Remote string // the export's NQN when imported; empty when local
	// Member and Volume are the superblock's member and volume UUIDs;
	// zero when Err is set.
	Member, Volume [16]byte
	Err            error // no readable fabraid superblock
}

// Result is the outcome of one Reconcile.
type Result struct {
	// Paths maps every wanted member found on exactly one device to that
	// device.
	Paths map[[16]byte]string
	// Missing lists the wanted members not in Paths, in Input order.
	Missing [][16]byte
	// Devices lists every candidate looked at.
	Devices []Device
	// Problems: failed connects, duplicate members; the rest still
	// resolves.
	Problems []error
}

// Importer reconciles one node's member connections. Safe for one
// Reconcile at a time.
type Importer struct {
	Host *nvmf.Host
	// Keys receives the TLS pair keys before a TLS connect, and loses
	// this host's drive pair keys no connection needs after each
	// Reconcile (nil: the kernel's .nvme keyring, fabrictls.KernelKeys).
	Keys fabrictls.Keys
	// PathTimeout bounds the wait for a new controller's namespace
	// (default 15 s).
	PathTimeout time.Duration
}

// New returns an Importer on the real system.
func New() *Importer { return &Importer{Host: nvmf.NewHost()} }

// Connections returns the connect options of in.Remotes: member timeout
// profile, this host's identity and secret. Pure.
func Connections(in Input) ([]nvmf.Options, error) {
	t, err := nvmf.Profile(nvmf.ProfileMember)
	if err != nil {
		return nil, err
	}
	var out []nvmf.Options
	for _, r := range in.Remotes {
		if !strings.HasPrefix(r.NQN, exporter.NQNPrefix) {
			return nil, fmt.Errorf("import %s: not a drive export (want %s*)", r.NQN, exporter.NQNPrefix)
		}
		svc := r.ServiceID
		if svc == "" {
			svc = exporter.DefaultServiceID
		}
		o := nvmf.Options{Transport: nvmf.TCP, Address: r.Address, ServiceID: svc, NQN: r.NQN,
			HostNQN: in.Identity.NQN, HostID: in.Identity.ID, Timeouts: &t, DHCHAPSecret: in.Secret.Reveal()}
		if in.Secret != "" {
			o.DHCHAPCtrlSecret = r.CtrlSecret.Reveal()
		}
		o.TLS = r.TLS
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("import %s from %s: %w", r.NQN, r.Address, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Reconcile converges the node's drive connections to in and returns
// where each wanted member is now; see the package documentation. The
// error is for what stops the whole reconcile (sysfs unreadable, bad
// input); per-member trouble is in Result.Problems.
func (im *Importer) Reconcile(ctx context.Context, in Input) (Result, error) {
	var res Result
	desired, err := Connections(in)
	if err != nil {
		return res, err
	}
	ctrls, err := im.Host.Sysfs.Controllers()
	if err != nil {
		return res, fmt.Errorf("import: %w", err)
	}
	plan := nvmf.PlanConnections(desired, ctrls, exporter.NQNPrefix)
	im.disconnect(ctx, plan.Disconnect, &res)
	for _, r := range plan.Retime {
		if err := im.Host.SetTimeouts(r.Name, r.Timeouts); err != nil {
			res.Problems = append(res.Problems, fmt.Errorf("import: %w", err))
		}
	}
	for _, r := range plan.Rekey { // a rotated key: re-authenticate
		if err := im.Host.Rekey(r.Name, r.Attr, r.Secret); err != nil {
			res.Problems = append(res.Problems, fmt.Errorf("import: %w", err))
		}
	}
	keepOnly := map[string]string{}
	for _, r := range in.Remotes {
		switch {
		case r.KeepOnly:
			keepOnly[r.NQN] = "its node is dead or not fenced for this owner yet"
		case r.Refused != "":
			keepOnly[r.NQN] = r.Refused
		}
	}
	noKey := im.tlsKeys(in, desired, &res)
	for _, o := range plan.Connect {
		if why := keepOnly[o.NQN]; why != "" {
			res.Problems = append(res.Problems, fmt.Errorf("import %s from %s: %s; not connecting", o.NQN, o.Address, why))
			continue
		}
		if noKey[o.NQN+"@"+o.Address] {
			continue
		}
		if err := im.connect(ctx, o); err != nil {
			res.Problems = append(res.Problems, err)
		}
	}
	if ctrls, err = im.Host.Sysfs.Controllers(); err != nil {
		return res, fmt.Errorf("import: %w", err)
	}
	if err := im.pruneKeys(in.Identity.NQN, desired, ctrls); err != nil {
		res.Problems = append(res.Problems, err)
	}
	var cands []Device
	for _, p := range in.Local {
		cands = append(cands, Device{Path: p})
	}
	cands = append(cands, imported(desired, ctrls, im.Host.Dev)...)
	for i := range cands {
		cands[i].Member, cands[i].Volume, cands[i].Err = readIdentity(cands[i].Path)
	}
	res.Devices = cands
	paths, missing, problems := Resolve(in.Members, cands)
	res.Paths, res.Missing = paths, missing
	res.Problems = append(res.Problems, problems...)
	return res, nil
}

// disconnect deletes unwanted controllers concurrently. Deleting a
// controller whose target is gone can block in the kernel for the admin
// timeout; when ctx ends first, the deletions carry on in the background.
func (im *Importer) disconnect(ctx context.Context, names []string, res *Result) {
	if len(names) == 0 {
		return
	}
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- im.Host.Disconnect(n)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		res.Problems = append(res.Problems, fmt.Errorf("import: disconnect %v: %w", names, ctx.Err()))
		return
	}
	close(errs)
	for err := range errs {
		if err != nil {
			res.Problems = append(res.Problems, fmt.Errorf("import: %w", err))
		}
	}
}

// tlsKeys puts the pair key of every TLS connection of desired where the
// kernel finds it, every pass: a kept controller looks its key up again on
// each reconnect, and a rotated host secret changes the key (the targets
// derive theirs from the new secret). It returns the connections
// (NQN@address) left without a key, each a problem in res.
func (im *Importer) tlsKeys(in Input, desired []nvmf.Options, res *Result) map[string]bool {
	noKey := map[string]bool{}
	for _, o := range desired {
		if err := im.tlsKey(in, o); err != nil {
			res.Problems = append(res.Problems, err)
			noKey[o.NQN+"@"+o.Address] = true
		}
	}
	return noKey
}

// tlsKey puts the pair key of a TLS connection where the kernel finds it
// (nothing for a plain one).
func (im *Importer) tlsKey(in Input, o nvmf.Options) error {
	if !o.TLS {
		return nil
	}
	k, err := fabrictls.PairKey(in.Secret, o.HostNQN, o.NQN)
	if err != nil {
		return fmt.Errorf("import %s from %s:%s: %w", o.NQN, o.Address, o.ServiceID, err)
	}
	if err := im.keys().Insert(k); err != nil {
		return fmt.Errorf("import %s from %s:%s: TLS key %s: %w", o.NQN, o.Address, o.ServiceID, k.Identity, err)
	}
	return nil
}

func (im *Importer) connect(ctx context.Context, o nvmf.Options) error {
	c, err := im.Host.Connect(o)
	if err != nil {
		return fmt.Errorf("import %s from %s:%s: %w", o.NQN, o.Address, o.ServiceID, err)
	}
	d := im.PathTimeout
	if d == 0 {
		d = 15 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := im.Host.WaitPaths(wctx, c.Name, 1); err != nil {
		return fmt.Errorf("import %s from %s:%s: %w", o.NQN, o.Address, o.ServiceID, err)
	}
	return nil
}

// imported returns the namespace heads of the live controllers that match
// a desired connection. Pure but for the dev directory in the paths.
func imported(desired []nvmf.Options, ctrls []nvmf.Controller, dev string) []Device {
	type key struct{ traddr, trsvcid, nqn, hostnqn string }
	want := map[key]bool{}
	for _, o := range desired {
		want[key{o.Address, o.ServiceID, o.NQN, o.HostNQN}] = true
	}
	var out []Device
	seen := map[string]bool{}
	for _, c := range ctrls {
		if c.State != "live" || !want[key{c.Address.TrAddr, c.Address.TrSvcID, c.SubsystemNQN, c.HostNQN}] {
			continue
		}
		for _, p := range c.Paths {
			path := filepath.Join(dev, p.Head)
			if !seen[path] {
				seen[path] = true
				out = append(out, Device{Path: path, Remote: c.SubsystemNQN})
			}
		}
	}
	slices.SortFunc(out, func(a, b Device) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// ErrDuplicate is wrapped by the Problem of a member found on two devices.
var ErrDuplicate = errors.New("member found on more than one device")

// Resolve maps the wanted members to the devices whose superblock names
// them. A member on two or more devices is left unmapped (a Problem
// wrapping ErrDuplicate). Pure.
func Resolve(wanted [][16]byte, devs []Device) (paths map[[16]byte]string, missing [][16]byte, problems []error) {
	on := map[[16]byte][]string{}
	for _, d := range devs {
		if d.Err == nil {
			on[d.Member] = append(on[d.Member], d.Path)
		}
	}
	paths = map[[16]byte]string{}
	for _, w := range wanted {
		switch ps := on[w]; len(ps) {
		case 0:
			missing = append(missing, w)
		case 1:
			paths[w] = ps[0]
		default:
			missing = append(missing, w)
			problems = append(problems, fmt.Errorf("member %s on %s: %w; not used", formatUUID(w), strings.Join(ps, " and "), ErrDuplicate))
		}
	}
	return paths, missing, problems
}

// readIdentity reads a device's superblock (both copies, the newer valid
// one wins) and returns its member and volume UUIDs.
func readIdentity(path string) (member, volume [16]byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return member, volume, fmt.Errorf("read superblock: %w", err)
	}
	defer f.Close()
	dropCache(f)
	sb, err := superblock.ReadCopies(f)
	if err != nil {
		return member, volume, fmt.Errorf("read superblock of %s: %w", path, err)
	}
	return sb.MemberUUID, sb.VolumeUUID, nil
}

func formatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
