package spdk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/plugins/backend"
)

// Backend is the SPDK target backend.
type Backend struct {
	RPC *Client
}

// New returns a Backend on socket (DefaultSocket when empty).
func New(socket string) *Backend {
	if socket == "" {
		socket = DefaultSocket
	}
	return &Backend{RPC: &Client{Socket: socket}}
}

var _ backend.Backend = (*Backend)(nil)

func (b *Backend) call(ctx context.Context, method string, params, out any) error {
	return classify(b.RPC.Call(ctx, method, params, out))
}

// Features asks spdk_get_version and rpc_get_methods.
func (b *Backend) Features(ctx context.Context) (backend.Features, error) {
	var v struct{ Version string }
	if err := b.call(ctx, "spdk_get_version", nil, &v); err != nil {
		return backend.Features{}, err
	}
	return backend.Features{Name: "spdk", Version: v.Version, ANA: true, Transports: []string{"tcp"}}, nil
}

func (b *Backend) methods(ctx context.Context) (map[string]bool, error) {
	var list []string
	if err := b.call(ctx, "rpc_get_methods", map[string]any{"current": true}, &list); err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, s := range list {
		m[s] = true
	}
	return m, nil
}

// subsystem is an nvmf_get_subsystems entry.
type subsystem struct {
	NQN             string    `json:"nqn"`
	Subtype         string    `json:"subtype"`
	ListenAddresses []address `json:"listen_addresses"`
	AllowAnyHost    bool      `json:"allow_any_host"`
	Hosts           []struct {
		NQN string `json:"nqn"`
	} `json:"hosts"`
	Serial     string      `json:"serial_number"`
	Model      string      `json:"model_number"`
	MinCntlID  uint16      `json:"min_cntlid"`
	MaxCntlID  uint16      `json:"max_cntlid"`
	Namespaces []namespace `json:"namespaces"`
}

type namespace struct {
	NSID     uint32 `json:"nsid"`
	BdevName string `json:"bdev_name"`
	NGUID    string `json:"nguid"`
	UUID     string `json:"uuid"`
	ANAGroup uint32 `json:"anagrpid"`
}

type address struct {
	Trtype  string `json:"trtype"`
	Adrfam  string `json:"adrfam"`
	Traddr  string `json:"traddr"`
	Trsvcid string `json:"trsvcid"`
}

func (a address) same(o address) bool {
	return strings.EqualFold(a.Trtype, o.Trtype) && strings.EqualFold(a.Adrfam, o.Adrfam) && a.Traddr == o.Traddr && a.Trsvcid == o.Trsvcid
}

func listenAddress(l backend.Listener) address {
	fam := "ipv4"
	if strings.Contains(l.Address, ":") {
		fam = "ipv6"
	}
	return address{Trtype: strings.ToLower(l.Transport), Adrfam: fam, Traddr: l.Address, Trsvcid: l.ServiceID}
}

type listener struct {
	Address   address `json:"address"`
	ANAStates []struct {
		Group uint32 `json:"ana_group"`
		State string `json:"ana_state"`
	} `json:"ana_states"`
}

func (b *Backend) subsystems(ctx context.Context) ([]subsystem, error) {
	var subs []subsystem
	err := b.call(ctx, "nvmf_get_subsystems", nil, &subs)
	return subs, err
}

// bdevName derives the bdev of a namespace from its export and device, so
// a changed device is a different bdev.
func bdevName(nqn string, nsid uint32, device string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", nqn, nsid, device)))
	return "fabraid_" + hex.EncodeToString(sum[:8])
}

// spdkANA spells ANA states the way SPDK does.
func spdkANA(s string) (string, error) {
	switch s {
	case "optimized", "inaccessible":
		return s, nil
	case "non-optimized", "non_optimized":
		return "non_optimized", nil
	}
	return "", fmt.Errorf("ANA state %q: %w", s, backend.ErrInvalid)
}

func validate(req backend.ApplyRequest) error {
	if !strings.HasPrefix(req.Scope, "nqn.") || len(req.Scope) < 8 {
		return fmt.Errorf("scope %q: want an NQN prefix: %w", req.Scope, backend.ErrInvalid)
	}
	for _, e := range req.Exports {
		if !strings.HasPrefix(e.NQN, req.Scope) || len(e.NQN) > 223 {
			return fmt.Errorf("export %s: not in scope %s or too long: %w", e.NQN, req.Scope, backend.ErrInvalid)
		}
		if len(e.Serial) > 20 || len(e.Model) > 40 {
			return fmt.Errorf("export %s: serial at most 20, model at most 40 characters: %w", e.NQN, backend.ErrInvalid)
		}
		if e.CntlIDMin != 0 || e.CntlIDMax != 0 {
			// nvmf_create_subsystem documents min_cntlid/max_cntlid, but
			// no recorded SPDK exchange covers them (plugins/spdk/testdata).
			return fmt.Errorf("export %s: controller id range %d..%d through SPDK (min_cntlid/max_cntlid untested against a real nvmf_tgt): %w", e.NQN, e.CntlIDMin, e.CntlIDMax, backend.ErrNotSupported)
		}
		for _, h := range e.Hosts {
			if h.DHCHAPKey != "" || h.DHCHAPCtrlKey != "" {
				return fmt.Errorf("export %s host %s: DH-HMAC-CHAP through SPDK's keyring: %w", e.NQN, h.NQN, backend.ErrNotSupported)
			}
		}
		for _, l := range e.Listeners {
			if !strings.EqualFold(l.Transport, "tcp") {
				return fmt.Errorf("export %s: transport %q: %w", e.NQN, l.Transport, backend.ErrNotSupported)
			}
			for _, st := range l.ANAStates {
				if _, err := spdkANA(st); err != nil {
					return fmt.Errorf("export %s: %w", e.NQN, err)
				}
			}
		}
		for _, ns := range e.Namespaces {
			if ns.NSID == 0 || !strings.HasPrefix(ns.Device, "/") {
				return fmt.Errorf("export %s namespace %d: want an nsid and an absolute device: %w", e.NQN, ns.NSID, backend.ErrInvalid)
			}
			if _, err := hex.DecodeString(ns.NGUID); err != nil || (ns.NGUID != "" && len(ns.NGUID) != 32) {
				return fmt.Errorf("export %s namespace %d: NGUID %q: want 32 hex digits: %w", e.NQN, ns.NSID, ns.NGUID, backend.ErrInvalid)
			}
		}
	}
	return nil
}

// applier carries one Apply's reads and its log of changes.
type applier struct {
	b       *Backend
	ctx     context.Context
	methods map[string]bool
	ops     []string
}

func (a *applier) do(method string, params any, what string) error {
	if err := a.b.call(a.ctx, method, params, nil); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	a.ops = append(a.ops, what)
	return nil
}

// Apply converges the scope's subsystems to req.
func (b *Backend) Apply(ctx context.Context, req backend.ApplyRequest) (backend.ApplyResult, error) {
	if err := validate(req); err != nil {
		return backend.ApplyResult{}, err
	}
	subs, err := b.subsystems(ctx)
	if err != nil {
		return backend.ApplyResult{}, err
	}
	a := &applier{b: b, ctx: ctx}
	if a.methods, err = b.methods(ctx); err != nil {
		return backend.ApplyResult{}, err
	}
	if len(req.Exports) > 0 {
		if err := a.transport(); err != nil {
			return a.result(), err
		}
	}
	want := map[string]bool{}
	for _, e := range req.Exports {
		// An unlinked listener is no listener of the export (SPDK keeps
		// no listener without a subsystem).
		e.Listeners = slices.DeleteFunc(slices.Clone(e.Listeners), func(l backend.Listener) bool { return l.Unlinked })
		want[e.NQN] = true
		i := slices.IndexFunc(subs, func(s subsystem) bool { return s.NQN == e.NQN })
		var cur *subsystem
		if i >= 0 {
			cur = &subs[i]
		}
		if err := a.export(e, cur); err != nil {
			return a.result(), err
		}
	}
	for _, s := range subs {
		if strings.HasPrefix(s.NQN, req.Scope) && !want[s.NQN] {
			if err := a.remove(s); err != nil {
				return a.result(), err
			}
		}
	}
	return a.result(), nil
}

func (a *applier) result() backend.ApplyResult {
	return backend.ApplyResult{Changed: len(a.ops) > 0, Ops: a.ops}
}

func (a *applier) transport() error {
	var ts []struct{ Trtype string }
	if err := a.b.call(a.ctx, "nvmf_get_transports", nil, &ts); err != nil {
		return err
	}
	for _, t := range ts {
		if strings.EqualFold(t.Trtype, "tcp") {
			return nil
		}
	}
	return a.do("nvmf_create_transport", map[string]any{"trtype": "TCP"}, "create transport TCP")
}

func (a *applier) export(e backend.Export, cur *subsystem) error {
	if cur != nil && ((e.Serial != "" && cur.Serial != e.Serial) || (e.Model != "" && cur.Model != e.Model)) {
		return fmt.Errorf("export %s: serial or model differ from the existing subsystem's; remove it first: %w", e.NQN, backend.ErrConflict)
	}
	if cur == nil {
		p := map[string]any{"nqn": e.NQN, "allow_any_host": false, "ana_reporting": true}
		if e.Serial != "" {
			p["serial_number"] = e.Serial
		}
		if e.Model != "" {
			p["model_number"] = e.Model
		}
		if err := a.do("nvmf_create_subsystem", p, "create subsystem "+e.NQN); err != nil {
			return err
		}
		cur = &subsystem{NQN: e.NQN}
	}
	if cur.AllowAnyHost {
		if err := a.do("nvmf_subsystem_allow_any_host", map[string]any{"nqn": e.NQN, "allow_any_host": false}, "disallow any host on "+e.NQN); err != nil {
			return err
		}
	}
	if err := a.namespaces(e, cur); err != nil {
		return err
	}
	if err := a.hosts(e, cur); err != nil {
		return err
	}
	return a.listeners(e, cur)
}

func (a *applier) namespaces(e backend.Export, cur *subsystem) error {
	for _, ns := range cur.Namespaces {
		d := slices.IndexFunc(e.Namespaces, func(n backend.Namespace) bool { return n.NSID == ns.NSID })
		if d >= 0 && !nsDiffers(e.NQN, e.Namespaces[d], ns) {
			continue
		}
		if err := a.do("nvmf_subsystem_remove_ns", map[string]any{"nqn": e.NQN, "nsid": ns.NSID}, fmt.Sprintf("remove namespace %d of %s", ns.NSID, e.NQN)); err != nil {
			return err
		}
		if err := a.deleteBdev(ns.BdevName); err != nil {
			return err
		}
	}
	for _, ns := range e.Namespaces {
		c := slices.IndexFunc(cur.Namespaces, func(n namespace) bool { return n.NSID == ns.NSID })
		if c >= 0 && !nsDiffers(e.NQN, ns, cur.Namespaces[c]) {
			continue
		}
		name := bdevName(e.NQN, ns.NSID, ns.Device)
		if err := a.bdev(name, ns.Device); err != nil {
			return err
		}
		spec := map[string]any{"bdev_name": name, "nsid": ns.NSID}
		if ns.UUID != "" {
			spec["uuid"] = strings.ToLower(ns.UUID)
		}
		if ns.NGUID != "" {
			spec["nguid"] = strings.ToUpper(ns.NGUID) // as nvmf_get_subsystems reports it
		}
		if ns.ANAGroup > 1 {
			spec["anagrpid"] = ns.ANAGroup
		}
		if err := a.do("nvmf_subsystem_add_ns", map[string]any{"nqn": e.NQN, "namespace": spec}, fmt.Sprintf("add namespace %d (%s) to %s", ns.NSID, ns.Device, e.NQN)); err != nil {
			return err
		}
	}
	return nil
}

func nsDiffers(nqn string, d backend.Namespace, a namespace) bool {
	g := max(d.ANAGroup, 1)
	ag := max(a.ANAGroup, 1)
	return a.BdevName != bdevName(nqn, d.NSID, d.Device) || (d.UUID != "" && !strings.EqualFold(d.UUID, a.UUID)) ||
		(d.NGUID != "" && !strings.EqualFold(d.NGUID, a.NGUID)) || g != ag
}

// bdev creates the bdev for device unless it exists.
func (a *applier) bdev(name, device string) error {
	err := a.b.call(a.ctx, "bdev_get_bdevs", map[string]any{"name": name}, nil)
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		return err
	}
	return a.do(a.bdevKind()+"_create", map[string]any{"filename": device, "name": name, "block_size": 4096}, "create bdev "+name+" on "+device)
}

func (a *applier) deleteBdev(name string) error {
	if !strings.HasPrefix(name, "fabraid_") {
		return nil // not ours
	}
	err := a.do(a.bdevKind()+"_delete", map[string]any{"name": name}, "delete bdev "+name)
	if isNotFound(err) {
		return nil
	}
	return err
}

// bdevKind is the bdev module fabraid uses on this target: io_uring where
// the target has it, else aio (one rule, so delete matches create).
func (a *applier) bdevKind() string {
	if a.methods["bdev_uring_create"] {
		return "bdev_uring"
	}
	return "bdev_aio"
}

func (a *applier) hosts(e backend.Export, cur *subsystem) error {
	have := map[string]bool{}
	for _, h := range cur.Hosts {
		have[h.NQN] = true
	}
	want := map[string]bool{}
	for _, h := range e.Hosts {
		want[h.NQN] = true
		if !have[h.NQN] {
			if err := a.do("nvmf_subsystem_add_host", map[string]any{"nqn": e.NQN, "host": h.NQN}, "allow host "+h.NQN+" on "+e.NQN); err != nil {
				return err
			}
		}
	}
	for h := range have {
		if !want[h] {
			if err := a.do("nvmf_subsystem_remove_host", map[string]any{"nqn": e.NQN, "host": h}, "disallow host "+h+" on "+e.NQN); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *applier) listeners(e backend.Export, cur *subsystem) error {
	for _, have := range cur.ListenAddresses {
		if !slices.ContainsFunc(e.Listeners, func(l backend.Listener) bool { return listenAddress(l).same(have) }) {
			if err := a.do("nvmf_subsystem_remove_listener", map[string]any{"nqn": e.NQN, "listen_address": have}, "remove listener "+have.Traddr+":"+have.Trsvcid+" of "+e.NQN); err != nil {
				return err
			}
		}
	}
	var states []listener
	needANA := slices.ContainsFunc(e.Listeners, func(l backend.Listener) bool { return len(l.ANAStates) > 0 })
	if needANA && len(cur.ListenAddresses) > 0 {
		if err := a.b.call(a.ctx, "nvmf_subsystem_get_listeners", map[string]any{"nqn": e.NQN}, &states); err != nil {
			return err
		}
	}
	for _, l := range e.Listeners {
		addr := listenAddress(l)
		if !slices.ContainsFunc(cur.ListenAddresses, addr.same) {
			if err := a.do("nvmf_subsystem_add_listener", map[string]any{"nqn": e.NQN, "listen_address": addr}, "add listener "+l.Address+":"+l.ServiceID+" to "+e.NQN); err != nil {
				return err
			}
		}
		for _, g := range sortedGroups(l.ANAStates) {
			st, _ := spdkANA(l.ANAStates[g])
			if anaState(states, addr, g) == st {
				continue
			}
			if err := a.setANA(e.NQN, addr, g, st); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *applier) setANA(nqn string, addr address, group uint32, state string) error {
	p := map[string]any{"nqn": nqn, "listen_address": addr, "ana_state": state, "anagrpid": max(group, 1)}
	return a.do("nvmf_subsystem_listener_set_ana_state", p, fmt.Sprintf("set ANA group %d of %s on %s:%s to %s", max(group, 1), nqn, addr.Traddr, addr.Trsvcid, state))
}

func anaState(ls []listener, addr address, group uint32) string {
	for _, l := range ls {
		if l.Address.same(addr) {
			for _, s := range l.ANAStates {
				if s.Group == max(group, 1) {
					return s.State
				}
			}
		}
	}
	return ""
}

func sortedGroups(m map[uint32]string) []uint32 {
	var g []uint32
	for k := range m {
		g = append(g, k)
	}
	slices.Sort(g)
	return g
}

func (a *applier) remove(s subsystem) error {
	if err := a.do("nvmf_delete_subsystem", map[string]any{"nqn": s.NQN}, "delete subsystem "+s.NQN); err != nil {
		return err
	}
	for _, ns := range s.Namespaces {
		if err := a.deleteBdev(ns.BdevName); err != nil {
			return err
		}
	}
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, backend.ErrNotFound) }

// List returns the scope's subsystems. Namespace Device is the SPDK bdev
// name (SPDK does not report an aio/uring bdev's file in nvmf state).
func (b *Backend) List(ctx context.Context, scope string) ([]backend.Export, error) {
	subs, err := b.subsystems(ctx)
	if err != nil {
		return nil, err
	}
	var out []backend.Export
	for _, s := range subs {
		if s.Subtype == "Discovery" || !strings.HasPrefix(s.NQN, scope) {
			continue
		}
		e := backend.Export{NQN: s.NQN, Serial: s.Serial, Model: s.Model}
		if s.MinCntlID > 1 || s.MaxCntlID != 0 && s.MaxCntlID < 0xffef {
			e.CntlIDMin, e.CntlIDMax = s.MinCntlID, s.MaxCntlID
		}
		for _, ns := range s.Namespaces {
			e.Namespaces = append(e.Namespaces, backend.Namespace{NSID: ns.NSID, Device: "spdk-bdev:" + ns.BdevName, UUID: ns.UUID, NGUID: strings.ToLower(ns.NGUID), ANAGroup: max(ns.ANAGroup, 1)})
		}
		var ls []listener
		if len(s.ListenAddresses) > 0 {
			if err := b.call(ctx, "nvmf_subsystem_get_listeners", map[string]any{"nqn": s.NQN}, &ls); err != nil {
				return nil, err
			}
		}
		for _, l := range ls {
			bl := backend.Listener{Transport: strings.ToLower(l.Address.Trtype), Address: l.Address.Traddr, ServiceID: l.Address.Trsvcid}
			for _, st := range l.ANAStates {
				if bl.ANAStates == nil {
					bl.ANAStates = map[uint32]string{}
				}
				bl.ANAStates[st.Group] = strings.ReplaceAll(st.State, "_", "-")
			}
			e.Listeners = append(e.Listeners, bl)
		}
		for _, h := range s.Hosts {
			e.Hosts = append(e.Hosts, backend.Host{NQN: h.NQN})
		}
		out = append(out, e)
	}
	return out, nil
}

// SetANAState sets one group's state on one listener.
func (b *Backend) SetANAState(ctx context.Context, req backend.ANARequest) error {
	st, err := spdkANA(req.State)
	if err != nil {
		return err
	}
	subs, err := b.subsystems(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(subs, func(s subsystem) bool { return s.NQN == req.NQN })
	addr := listenAddress(req.Listener)
	if i < 0 || !slices.ContainsFunc(subs[i].ListenAddresses, addr.same) {
		return fmt.Errorf("export %s listener %s:%s: %w", req.NQN, addr.Traddr, addr.Trsvcid, backend.ErrNotFound)
	}
	a := &applier{b: b, ctx: ctx}
	return a.setANA(req.NQN, addr, req.Group, st)
}

// Remove deletes the subsystem nqn and its bdevs.
func (b *Backend) Remove(ctx context.Context, nqn string) error {
	subs, err := b.subsystems(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(subs, func(s subsystem) bool { return s.NQN == nqn })
	if i < 0 {
		return fmt.Errorf("export %s: %w", nqn, backend.ErrNotFound)
	}
	a := &applier{b: b, ctx: ctx}
	if a.methods, err = b.methods(ctx); err != nil {
		return err
	}
	return a.remove(subs[i])
}
