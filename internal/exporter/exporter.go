package exporter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/plugins/backend"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// Exporter reconciles one node's drive exports through a target backend
// (plugins/backend, scope NQNPrefix). It caches the feature probe and
// nothing else: every Reconcile reads the target's actual state afresh.
// Run one Reconcile at a time.
type Exporter struct {
	// Target is the target backend: the in-process kernel nvmet backend
	// (New) or a plugin's Runner.
	Target backend.Backend
	// Keys receives the TLS pair keys before the ports are applied (nil:
	// the kernel's .nvme keyring, fabrictls.KernelKeys).
	Keys     fabrictls.Keys
	features *backend.Features
}

// New returns an Exporter on the in-process kernel nvmet backend at the
// configfs root (nvmet.DefaultRoot when empty).
func New(root string) *Exporter {
	if root == "" {
		root = nvmet.DefaultRoot
	}
	return &Exporter{Target: &pnvmet.Backend{Root: root, SysModule: "/sys/module"}}
}

// Features asks the target once (the kernel backend probes configfs
// attribute presence, removing an interrupted probe's objects first) and
// returns the cached answer afterwards; a failed probe is not cached.
func (x *Exporter) Features(ctx context.Context) (backend.Features, error) {
	if x.features != nil {
		return *x.features, nil
	}
	f, err := x.Target.Features(ctx)
	if err != nil {
		return f, fmt.Errorf("drive exporter: %w", err)
	}
	x.features = &f
	return f, nil
}

// Result is what one Reconcile did.
type Result struct {
	Exports  []Export // the drives exported now
	Problems []error  // drives or volumes left out (see Desired)
	// Fenced lists the drives unlinked from the ports before anything
	// else this time, which tore down their hosts' controllers: the owner
	// or its secret changed, or the drive is not to be exported any more.
	Fenced []string
	// Done lists the target operations carried out (no secrets); empty
	// when nothing changed.
	Done []string
	Auth bool // the target has DH-HMAC-CHAP
	// Refused is Desired.Refused: nothing is exported, and the drive
	// exports there were are gone (fenced first, like any stale export).
	Refused error
}

// Reconcile converges the node's drive exports to in: Desire, then (when
// Fence finds controllers to end) the fence step, then the desired state,
// then it reads the target's state back and checks that no drive export
// is Stale. It returns nil only after that check: every drive of in's
// volumes is then exported to its volume's Owner at most, so the caller
// may acknowledge the fence for each volume's Epoch. On error, calling
// Reconcile again finishes the job.
func (x *Exporter) Reconcile(ctx context.Context, in Input) (Result, error) {
	f, err := x.Features(ctx)
	if err != nil {
		return Result{}, err
	}
	d := desireHandover(in, nvmet.Features{Auth: f.Auth, TLS: f.TLS})
	res := Result{Exports: d.Exports, Problems: d.Problems, Auth: f.Auth, Refused: d.Refused}
	if err := x.insertKeys(d.Keys); err != nil {
		return res, err
	}
	actual, err := x.Target.List(ctx, NQNPrefix)
	if err != nil {
		return res, fmt.Errorf("drive exporter: %w", err)
	}
	step, fenced := Fence(d.Spec, withoutReleased(pnvmet.StateOf(actual), in), in.Rekeys)
	if len(fenced) > 0 {
		done, err := x.apply(ctx, step)
		res.Done = append(res.Done, done...)
		if err != nil {
			return res, fmt.Errorf("drive exporter: fence %v: %w", fenced, err)
		}
		res.Fenced = fenced
	}
	done, err := x.apply(ctx, d.Spec)
	res.Done = append(res.Done, done...)
	if err != nil {
		return res, fmt.Errorf("drive exporter: %w", err)
	}
	back, err := x.Target.List(ctx, NQNPrefix)
	if err != nil {
		return res, fmt.Errorf("drive exporter: read back: %w", err)
	}
	if stale := Stale(d.Spec, pnvmet.StateOf(back), in.Rekeys); len(stale) > 0 {
		return res, fmt.Errorf("drive exporter: read back after apply: %s still allow hosts other than their owners", strings.Join(slices.Sorted(maps.Keys(stale)), ", "))
	}
	if err := checkTLS(d.Spec, pnvmet.StateOf(back)); err != nil {
		return res, fmt.Errorf("drive exporter: read back after apply: %w", err)
	}
	if err := x.pruneKeys(in.HostNQN, d.Keys); err != nil {
		return res, err
	}
	return res, nil
}

// insertKeys puts the TLS pair keys where the kernel finds them.
func (x *Exporter) insertKeys(keys []nvmetls.Derived) error {
	var ks fabrictls.Keys = fabrictls.KernelKeys{}
	if x.Keys != nil {
		ks = x.Keys
	}
	if err := fabrictls.InsertKeys(ks, keys); err != nil {
		return fmt.Errorf("drive exporter: %w", err)
	}
	return nil
}

// checkTLS says which ports of actual do not take TLS as desired says
// (a backend that ignores Listener.TLS would serve plain ones). Pure.
func checkTLS(desired nvmet.Spec, actual nvmet.State) error {
	want := map[uint16]nvmet.Port{}
	for _, p := range desired.Ports {
		want[p.ID] = p
	}
	for _, p := range actual.Ports {
		if w, ok := want[p.ID]; ok && (w.TLS != p.TLS || w.TLSOptional != p.TLSOptional) {
			return fmt.Errorf("port %d takes TLS %v (optional %v), want %v (optional %v)", p.ID, p.TLS, p.TLSOptional, w.TLS, w.TLSOptional)
		}
	}
	return nil
}

func (x *Exporter) apply(ctx context.Context, spec nvmet.Spec) ([]string, error) {
	r, err := x.Target.Apply(ctx, backend.ApplyRequest{Scope: NQNPrefix, Exports: pnvmet.FromSpec(spec)})
	return r.Ops, err
}
