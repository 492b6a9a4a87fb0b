// Package nvmet is the kernel target backend (fabraid-plugin-nvmet):
// plugins/backend's Backend over kernel/nvmet's Spec → Diff → Apply.
//
// A scope is one of kernel/nvmet's ownerships (VolumeOwnership,
// DriveOwnership, DefaultOwnership, by NQN prefix): Apply converges exactly
// that ownership's subsystems and ports. Listeners become ports: the
// listener's PortID when set, else the owned port that already has the
// address, else the lowest free owned id. Hosts are the union of the
// exports' allowed hosts with their DH-HMAC-CHAP keys (one key per host).
package nvmet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/plugins/backend"
)

// Backend is the kernel nvmet backend on one configfs root. fabraidd runs
// it in-process (target_backend = nvmet) or fabraid-plugin-nvmet serves it
// (nvmet-plugin). Its methods are safe for concurrent use by callers of
// different scopes.
type Backend struct {
	Root      string // nvmet.DefaultRoot
	SysModule string // /sys/module

	probe    sync.Mutex // one feature probe at a time (they share names)
	features *backend.Features
}

var _ backend.Backend = (*Backend)(nil)

// ownership returns the kernel/nvmet ownership whose prefix is scope.
func ownership(scope string) (nvmet.Ownership, error) {
	for _, o := range []nvmet.Ownership{nvmet.VolumeOwnership(), nvmet.DriveOwnership(), nvmet.DefaultOwnership()} {
		if o.SubsystemPrefix == scope {
			return o, nil
		}
	}
	return nvmet.Ownership{}, fmt.Errorf("scope %q: the nvmet backend owns %s, %s or %s: %w", scope,
		nvmet.VolumeOwnership().SubsystemPrefix, nvmet.DriveOwnership().SubsystemPrefix, nvmet.DefaultOwnership().SubsystemPrefix, backend.ErrInvalid)
}

// scopeOf returns the narrowest scope an NQN belongs to.
func scopeOf(nqn string) (string, error) {
	for _, o := range []nvmet.Ownership{nvmet.VolumeOwnership(), nvmet.DriveOwnership(), nvmet.DefaultOwnership()} {
		if strings.HasPrefix(nqn, o.SubsystemPrefix) {
			return o.SubsystemPrefix, nil
		}
	}
	return "", fmt.Errorf("export %s: not a fabraid NQN: %w", nqn, backend.ErrNotFound)
}

func (b *Backend) target(scope string) (*nvmet.Target, error) {
	own, err := ownership(scope)
	if err != nil {
		return nil, err
	}
	t := nvmet.New(b.Root)
	t.Own = own
	return t, nil
}

// typed maps kernel/nvmet errors to backend errors.
func typed(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nvmet.ErrNotSupported):
		return fmt.Errorf("%w: %w", backend.ErrNotSupported, err)
	case errors.Is(err, nvmet.ErrKeyClearBlocked):
		return fmt.Errorf("%w: %w", backend.ErrConflict, err)
	}
	return err
}

// Features probes configfs once (kernel/nvmet Probe with the default
// ownership's probe names, removing an interrupted probe's leftovers) and
// returns the cached answer afterwards; a failed probe is not cached.
func (b *Backend) Features(context.Context) (backend.Features, error) {
	b.probe.Lock()
	defer b.probe.Unlock()
	if b.features != nil {
		return *b.features, nil
	}
	own := nvmet.DefaultOwnership()
	t := nvmet.New(b.Root)
	name := own.SubsystemPrefix + "probe"
	if _, err := t.Execute(nvmet.Plan{
		{Kind: nvmet.OpRmdir, Path: "hosts/" + name},
		{Kind: nvmet.OpRmdir, Path: "subsystems/" + name},
		{Kind: nvmet.OpRmdir, Path: fmt.Sprintf("ports/%d", own.MaxPort)},
	}); err != nil {
		return backend.Features{}, fmt.Errorf("nvmet features: remove an interrupted probe: %w", err)
	}
	f, err := nvmet.Probe(t.Root, b.SysModule, own)
	if err != nil {
		return backend.Features{}, fmt.Errorf("%w: %w", backend.ErrTransient, err)
	}
	out := backend.Features{Name: "nvmet", Auth: f.Auth, ANA: true, CntlIDRange: true, TLS: f.TLS}
	for _, tr := range f.Transports {
		out.Transports = append(out.Transports, string(tr))
	}
	b.features = &out
	return out, nil
}

// Spec converts the desired exports of a scope into the kernel/nvmet Spec
// of its ownership, choosing port ids against the actual state.
func Spec(own nvmet.Ownership, exports []backend.Export, actual nvmet.State) (nvmet.Spec, error) {
	var spec nvmet.Spec
	hosts := map[string]backend.Host{}
	ports := map[string]*nvmet.Port{} // by address key
	used := map[uint16]bool{}
	for _, e := range exports {
		if !strings.HasPrefix(e.NQN, own.SubsystemPrefix) {
			return spec, fmt.Errorf("export %s outside scope %s: %w", e.NQN, own.SubsystemPrefix, backend.ErrInvalid)
		}
		sub := nvmet.Subsystem{NQN: e.NQN, Serial: e.Serial, Model: e.Model, CntlIDMin: e.CntlIDMin, CntlIDMax: e.CntlIDMax}
		for _, ns := range e.Namespaces {
			sub.Namespaces = append(sub.Namespaces, nvmet.Namespace{NSID: ns.NSID, DevicePath: ns.Device, UUID: ns.UUID, NGUID: ns.NGUID, ANAGroup: ns.ANAGroup})
		}
		for _, h := range e.Hosts {
			if o, ok := hosts[h.NQN]; ok && (o.DHCHAPKey != h.DHCHAPKey || o.DHCHAPCtrlKey != h.DHCHAPCtrlKey) {
				return spec, fmt.Errorf("host %s: two exports give it different DH-HMAC-CHAP keys (nvmet keeps one per host): %w", h.NQN, backend.ErrConflict)
			}
			hosts[h.NQN] = h
			sub.AllowedHosts = append(sub.AllowedHosts, h.NQN)
		}
		spec.Subsystems = append(spec.Subsystems, sub)
		for _, l := range e.Listeners {
			key := strings.ToLower(l.Transport) + "|" + l.Address + "|" + l.ServiceID
			p := ports[key]
			if p == nil {
				p = &nvmet.Port{ID: l.PortID, Transport: nvmet.Transport(strings.ToLower(l.Transport)), Address: l.Address, ServiceID: l.ServiceID, ANAStates: map[uint32]nvmet.ANAState{},
					TLS: l.TLS, TLSOptional: l.TLS && l.TLSOptional}
				ports[key] = p
			}
			if p.TLS != l.TLS || p.TLSOptional != (l.TLS && l.TLSOptional) {
				return spec, fmt.Errorf("listener %s: TLS %v/optional %v and %v/%v (nvmet keeps TLS per port): %w", key, p.TLS, p.TLSOptional, l.TLS, l.TLSOptional, backend.ErrConflict)
			}
			if l.PortID != 0 && p.ID != l.PortID {
				return spec, fmt.Errorf("listener %s: port ids %d and %d: %w", key, p.ID, l.PortID, backend.ErrConflict)
			}
			if p.ID != 0 {
				used[p.ID] = true
			}
			if !l.Unlinked {
				p.Subsystems = append(p.Subsystems, e.NQN)
			}
			for g, st := range l.ANAStates {
				s := nvmet.ANAState(strings.ReplaceAll(st, "_", "-"))
				if o, ok := p.ANAStates[g]; ok && o != s {
					return spec, fmt.Errorf("listener %s ANA group %d: %s and %s (nvmet keeps ANA per port): %w", key, g, o, s, backend.ErrConflict)
				}
				p.ANAStates[g] = s
			}
		}
	}
	// Ports without an id: the owned port with the address, else the
	// lowest free owned id (the probe's MaxPort excluded).
	for _, key := range slices.Sorted(maps.Keys(ports)) {
		p := ports[key]
		if p.ID != 0 {
			continue
		}
		for _, ap := range actual.Ports {
			if ap.ID >= own.MinPort && ap.ID <= own.MaxPort && !used[ap.ID] && string(ap.Transport) == string(p.Transport) && ap.Address == p.Address && ap.ServiceID == p.ServiceID {
				p.ID = ap.ID
				break
			}
		}
		for id := own.MinPort; p.ID == 0 && id < own.MaxPort; id++ {
			if !used[id] {
				p.ID = id
			}
		}
		if p.ID == 0 {
			return spec, fmt.Errorf("no free nvmet port id in %d..%d: %w", own.MinPort, own.MaxPort, backend.ErrConflict)
		}
		used[p.ID] = true
	}
	for _, key := range slices.Sorted(maps.Keys(ports)) {
		spec.Ports = append(spec.Ports, *ports[key])
	}
	for _, n := range slices.Sorted(maps.Keys(hosts)) {
		h := hosts[n]
		spec.Hosts = append(spec.Hosts, nvmet.Host{NQN: n, DHCHAPKey: h.DHCHAPKey.Reveal(), DHCHAPCtrlKey: h.DHCHAPCtrlKey.Reveal()})
	}
	if err := spec.Validate(own); err != nil {
		return spec, fmt.Errorf("%w: %w", backend.ErrInvalid, err)
	}
	return spec, nil
}

// Exports converts the actual state's subsystems of own into exports.
func Exports(own nvmet.Ownership, st nvmet.State) []backend.Export {
	keys := map[string]nvmet.Host{}
	for _, h := range st.Hosts {
		keys[h.NQN] = h
	}
	var out []backend.Export
	for _, s := range st.Subsystems {
		if !strings.HasPrefix(s.NQN, own.SubsystemPrefix) {
			continue
		}
		e := backend.Export{NQN: s.NQN, Serial: s.Serial, Model: s.Model, CntlIDMin: s.CntlIDMin, CntlIDMax: s.CntlIDMax}
		for _, ns := range s.Namespaces {
			e.Namespaces = append(e.Namespaces, backend.Namespace{NSID: ns.NSID, Device: ns.DevicePath, UUID: ns.UUID, NGUID: ns.NGUID, ANAGroup: max(ns.ANAGroup, 1)})
		}
		for _, h := range s.AllowedHosts {
			k := keys[h]
			e.Hosts = append(e.Hosts, backend.Host{NQN: h, DHCHAPKey: backend.Secret(k.DHCHAPKey), DHCHAPCtrlKey: backend.Secret(k.DHCHAPCtrlKey)})
		}
		for _, p := range st.Ports {
			if !slices.Contains(p.Subsystems, s.NQN) {
				continue
			}
			l := backend.Listener{Transport: string(p.Transport), Address: p.Address, ServiceID: p.ServiceID, PortID: p.ID, ANAStates: map[uint32]string{},
				TLS: p.TLS, TLSOptional: p.TLSOptional}
			for g, a := range p.ANAStates {
				l.ANAStates[g] = string(a)
			}
			e.Listeners = append(e.Listeners, l)
		}
		out = append(out, e)
	}
	return out
}

// Apply converges the scope's ownership to req.
func (b *Backend) Apply(_ context.Context, req backend.ApplyRequest) (backend.ApplyResult, error) {
	t, err := b.target(req.Scope)
	if err != nil {
		return backend.ApplyResult{}, err
	}
	actual, err := t.Read()
	if err != nil {
		return backend.ApplyResult{}, fmt.Errorf("%w: %w", backend.ErrTransient, err)
	}
	spec, err := Spec(t.Own, req.Exports, actual)
	if err != nil {
		return backend.ApplyResult{}, err
	}
	done, err := t.Apply(spec)
	res := backend.ApplyResult{Changed: len(done) > 0}
	for _, o := range done {
		res.Ops = append(res.Ops, o.String()) // Op.String redacts keys
	}
	return res, typed(err)
}

// List returns the scope's actual exports.
func (b *Backend) List(_ context.Context, scope string) ([]backend.Export, error) {
	t, err := b.target(scope)
	if err != nil {
		return nil, err
	}
	st, err := t.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrTransient, err)
	}
	return Exports(t.Own, st), nil
}

// modify re-applies the scope of nqn with fn applied to its exports.
func (b *Backend) modify(ctx context.Context, nqn string, fn func([]backend.Export, int) ([]backend.Export, error)) error {
	scope, err := scopeOf(nqn)
	if err != nil {
		return err
	}
	ex, err := b.List(ctx, scope)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ex, func(e backend.Export) bool { return e.NQN == nqn })
	if i < 0 {
		return fmt.Errorf("export %s: %w", nqn, backend.ErrNotFound)
	}
	if ex, err = fn(ex, i); err != nil {
		return err
	}
	_, err = b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: ex})
	return err
}

// SetANAState sets one group on the port of one listener (in nvmet the
// state belongs to the port, shared by every subsystem linked there).
func (b *Backend) SetANAState(ctx context.Context, req backend.ANARequest) error {
	return b.modify(ctx, req.NQN, func(ex []backend.Export, i int) ([]backend.Export, error) {
		g := max(req.Group, 1)
		found := false
		for j := range ex {
			for k := range ex[j].Listeners {
				l := &ex[j].Listeners[k]
				if l.Address == req.Listener.Address && l.ServiceID == req.Listener.ServiceID {
					if j == i {
						found = true
					}
					l.ANAStates[g] = req.State
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("export %s listener %s:%s: %w", req.NQN, req.Listener.Address, req.Listener.ServiceID, backend.ErrNotFound)
		}
		return ex, nil
	})
}

// Remove drops one export.
func (b *Backend) Remove(ctx context.Context, nqn string) error {
	return b.modify(ctx, nqn, func(ex []backend.Export, i int) ([]backend.Export, error) {
		return slices.Delete(ex, i, i+1), nil
	})
}

// FromSpec converts a kernel/nvmet Spec into exports (the inverse of Spec
// for a spec whose ports all have ids): each subsystem with its hosts'
// keys and one listener per port linking it. Ports linking nothing have
// no export to belong to and are dropped (Apply then removes them).
func FromSpec(spec nvmet.Spec) []backend.Export {
	return Exports(nvmet.Ownership{}, nvmet.State{Spec: spec})
}

// StateOf converts exports (as List returns them) into the kernel/nvmet
// state they describe, for code that reasons on nvmet.State.
func StateOf(exports []backend.Export) nvmet.State {
	var st nvmet.State
	ports := map[uint16]int{}
	hosts := map[string]bool{}
	for _, e := range exports {
		sub := nvmet.Subsystem{NQN: e.NQN, Serial: e.Serial, Model: e.Model, CntlIDMin: e.CntlIDMin, CntlIDMax: e.CntlIDMax}
		for _, ns := range e.Namespaces {
			sub.Namespaces = append(sub.Namespaces, nvmet.Namespace{NSID: ns.NSID, DevicePath: ns.Device, UUID: ns.UUID, NGUID: ns.NGUID, ANAGroup: ns.ANAGroup})
		}
		for _, h := range e.Hosts {
			sub.AllowedHosts = append(sub.AllowedHosts, h.NQN)
			if !hosts[h.NQN] {
				hosts[h.NQN] = true
				st.Hosts = append(st.Hosts, nvmet.Host{NQN: h.NQN, DHCHAPKey: h.DHCHAPKey.Reveal(), DHCHAPCtrlKey: h.DHCHAPCtrlKey.Reveal()})
			}
		}
		st.Subsystems = append(st.Subsystems, sub)
		for _, l := range e.Listeners {
			i, ok := ports[l.PortID]
			if !ok {
				i = len(st.Ports)
				ports[l.PortID] = i
				p := nvmet.Port{ID: l.PortID, Transport: nvmet.Transport(l.Transport), Address: l.Address, ServiceID: l.ServiceID, ANAStates: map[uint32]nvmet.ANAState{},
					TLS: l.TLS, TLSOptional: l.TLS && l.TLSOptional}
				for g, a := range l.ANAStates {
					p.ANAStates[g] = nvmet.ANAState(a)
				}
				st.Ports = append(st.Ports, p)
			}
			st.Ports[i].Subsystems = append(st.Ports[i].Subsystems, e.NQN)
		}
	}
	return st
}
