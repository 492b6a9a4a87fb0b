package volmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/plugins/backend"
)

// opLog is one list of what the Manager asked of the target and the
// engines, in order.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(format string, a ...any) {
	l.mu.Lock()
	l.ops = append(l.ops, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

func (l *opLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// orderBackend logs every export of every Apply with its listeners
// linked and unlinked; ignoreUnlinked makes it a backend that keeps an
// unlinked listener linked.
type orderBackend struct {
	anaBackend
	log            *opLog
	applyErr       error
	ignoreUnlinked bool
}

func (b *orderBackend) Apply(ctx context.Context, req backend.ApplyRequest) (backend.ApplyResult, error) {
	if b.applyErr != nil {
		b.log.add("apply failed")
		return backend.ApplyResult{}, b.applyErr
	}
	exports := slices.Clone(req.Exports)
	for i, e := range exports {
		linked, unlinked := 0, 0
		for _, l := range e.Listeners {
			if l.Unlinked {
				unlinked++
			} else {
				linked++
			}
		}
		b.log.add("apply %s linked %d unlinked %d", e.NQN[len(e.NQN)-2:], linked, unlinked)
		if b.ignoreUnlinked {
			ls := slices.Clone(e.Listeners)
			for j := range ls {
				ls[j].Unlinked = false
			}
			exports[i].Listeners = ls
		}
	}
	return b.anaBackend.Apply(ctx, backend.ApplyRequest{Scope: req.Scope, Exports: exports})
}

// orderEngine logs its Stop.
type orderEngine struct {
	epochEngine
	name    string
	log     *opLog
	stopErr error
}

func (f *orderEngine) Stop() error { f.log.add("stop %s", f.name); return f.stopErr }

// A frozen engine the node must stop loses its port links (the ports
// stay) before it stops (so its held requests fail on sockets already
// shut); an engine that is not frozen is left to the usual path; a failed
// unlink, a backend that keeps the link, or a failed stop keeps the
// volume out of this pass's Stop list (its export stays).
func TestStopFrozen(t *testing.T) {
	ctx := context.Background()
	// volid.NQN(u) ends in "01", volid.NQN(w) in "02".
	u, w := [16]byte{15: 1}, [16]byte{15: 2}
	spec := []backend.Export{
		{NQN: volid.NQN(u), Listeners: []backend.Listener{{Transport: "tcp", Address: "10.0.0.1", ServiceID: "4421"}}},
		{NQN: volid.NQN(w), Listeners: []backend.Listener{{Transport: "tcp", Address: "10.0.0.1", ServiceID: "4421"}}},
	}
	setup := func(applyErr, stopErr error) (*Manager, *opLog, *ClusterPlan) {
		log := &opLog{}
		m := &Manager{x: &exporter{target: &orderBackend{log: log, applyErr: applyErr}, applied: slices.Clone(spec)},
			log: slog.New(slog.DiscardHandler), names: map[[16]byte]string{}, engines: map[[16]byte]Engine{
				u: &orderEngine{epochEngine: epochEngine{frozen: true}, name: "u", log: log, stopErr: stopErr},
				w: &orderEngine{name: "w", log: log},
			}}
		return m, log, &ClusterPlan{Stop: [][16]byte{u, w}}
	}

	m, log, p := setup(nil, nil)
	if errs := m.stopFrozen(ctx, p); len(errs) != 0 {
		t.Fatal(errs)
	}
	if want := []string{"apply 01 linked 0 unlinked 1", "apply 02 linked 1 unlinked 0", "stop u"}; !slices.Equal(log.list(), want) {
		t.Errorf("ops %q, want %q", log.list(), want)
	}
	if !slices.Equal(p.Stop, [][16]byte{u, w}) || m.engines[u] != nil || m.engines[w] == nil {
		t.Errorf("stop list %v, engines %v: want both still in Stop, u's engine gone, w's kept", p.Stop, m.engines)
	}

	m, log, p = setup(errors.New("configfs busy"), nil)
	if errs := m.stopFrozen(ctx, p); len(errs) != 1 {
		t.Fatalf("failed unlink: errors %v, want one", errs)
	}
	if slices.Contains(log.list(), "stop u") || !slices.Equal(p.Stop, [][16]byte{w}) {
		t.Errorf("failed unlink: ops %q, stop list %v; want no stop, u out of Stop", log.list(), p.Stop)
	}

	m, log, p = setup(nil, nil)
	m.x.target.(*orderBackend).ignoreUnlinked = true
	if errs := m.stopFrozen(ctx, p); len(errs) != 1 || slices.Contains(log.list(), "stop u") || !slices.Equal(p.Stop, [][16]byte{w}) {
		t.Errorf("backend ignoring Unlinked: errors %v, ops %q, stop list %v; want one error, no stop, u out of Stop", errs, log.list(), p.Stop)
	}

	m, _, p = setup(nil, errors.New("engine gone"))
	if errs := m.stopFrozen(ctx, p); len(errs) != 1 || m.engines[u] == nil || !slices.Equal(p.Stop, [][16]byte{w}) {
		t.Errorf("failed stop: errors %v, stop list %v; want one error, u kept and out of Stop", errs, p.Stop)
	}
}

// A frozen engine's export is inaccessible in every reconcile until the
// engine thaws, and FreezeAll sets it inaccessible at once.
func TestFrozenExportInaccessible(t *testing.T) {
	ctx := context.Background()
	u, w := [16]byte{1}, [16]byte{2}
	b := &anaBackend{}
	e := &epochEngine{epoch: 3}
	m := &Manager{x: &exporter{target: b}, log: slog.New(slog.DiscardHandler),
		engines: map[[16]byte]Engine{u: e}, plan: &ClusterPlan{Addresses: []string{"10.0.0.1"}}}
	out, err := m.x.withANA(ctx, []Export{{UUID: u, Frozen: true}, {UUID: w}}, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].ANAState != ANAInaccessible || out[1].ANAState != ANAOptimized {
		t.Errorf("frozen u %q, running w %q; want inaccessible, optimized", out[0].ANAState, out[1].ANAState)
	}
	if err := m.FreezeAll(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(b.anaCalls()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	calls := b.anaCalls()
	if len(calls) != 1 || calls[0].NQN != volid.NQN(u) || calls[0].State != ANAInaccessible || calls[0].Group != out[0].ANAGroup {
		t.Errorf("ANA calls after FreezeAll: %+v, want u's group %d inaccessible", calls, out[0].ANAGroup)
	}
	out, _ = m.x.withANA(ctx, []Export{{UUID: u}, {UUID: w}}, 0, 0, nil)
	if out[0].ANAState != ANAOptimized {
		t.Errorf("thawed u: %q, want optimized", out[0].ANAState)
	}
}

// A frozen engine hands its requests off only once its export is
// inaccessible on every export address: u (both addresses set) hands off
// after both ANA changes; w (the second address refused) and x (no group
// of its own: nothing set) keep holding; an engine thawed meanwhile (y)
// is not handed off. Hand off before the ANA change, or despite a
// failed one, and this fails.
func TestHandOffFrozenAfterInaccessible(t *testing.T) {
	ctx := context.Background()
	u, w, x, y := [16]byte{1}, [16]byte{2}, [16]byte{3}, [16]byte{4}
	eu, ew, ex, ey := &epochEngine{frozen: true}, &epochEngine{frozen: true}, &epochEngine{frozen: true}, &epochEngine{}
	b := &anaBackend{}
	m := &Manager{x: &exporter{target: b}, log: slog.New(slog.DiscardHandler), names: map[[16]byte]string{},
		engines: map[[16]byte]Engine{u: eu, w: ew, x: ex, y: ey},
		plan:    &ClusterPlan{Addresses: []string{"10.0.0.1", "10.0.1.1"}}}
	if _, err := m.x.withANA(ctx, []Export{{UUID: u}, {UUID: w}, {UUID: y}}, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	var early []string
	b.setHook = func(req backend.ANARequest) error {
		if slices.Contains(eu.calls, "handoff") && req.NQN == volid.NQN(u) {
			early = append(early, req.Listener.Address)
		}
		if req.NQN == volid.NQN(w) && req.Listener.Address == "10.0.1.1" {
			return errors.New("configfs: no such port")
		}
		return nil
	}
	m.handOffFrozen(map[[16]byte]Engine{u: eu, w: ew, x: ex, y: ey})
	if !slices.Equal(eu.calls, []string{"handoff"}) || len(early) != 0 {
		t.Errorf("u: calls %q, ANA set after the hand-off on %q; want one hand-off after both", eu.calls, early)
	}
	for name, e := range map[string]*epochEngine{"w (one address refused)": ew, "x (no group)": ex, "y (thawed)": ey} {
		if len(e.calls) != 0 {
			t.Errorf("%s: calls %q, want none", name, e.calls)
		}
	}
	var setFor []string
	for _, c := range b.anaCalls() {
		if c.State != ANAInaccessible {
			t.Errorf("ANA call %+v, want inaccessible", c)
		}
		setFor = append(setFor, c.NQN)
	}
	if slices.Contains(setFor, volid.NQN(x)) {
		t.Errorf("ANA set for x, which has no group of its own: %q", setFor)
	}
}
