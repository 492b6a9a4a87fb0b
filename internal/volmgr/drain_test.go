package volmgr

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// drainEngine is an engine double whose ublk device is ublkb7.
type drainEngine struct{ epochEngine }

func (f *drainEngine) Status() (EngineStatus, error) {
	st, err := f.epochEngine.Status()
	st.UblkPath = "/dev/ublkb7"
	return st, err
}

// DrainEngine turns the export inaccessible first, then freezes the
// engine, hands its requests off and flushes (in that order: a hand-off on
// a port still optimized comes back to the engine, and a flush before the
// freeze leaves writes after it unflushed); the plan's Drain volumes stay
// inaccessible in every later reconcile, whatever SetANAState said; the
// last reconcile's exports and controllers are reported.
func TestDrainEngine(t *testing.T) {
	ctx := context.Background()
	u, other := [16]byte{1}, [16]byte{2}
	b := &anaBackend{}
	m := &Manager{x: &exporter{target: b}, log: slog.New(slog.DiscardHandler), engines: map[[16]byte]Engine{}}
	e := &drainEngine{}
	m.engines[u] = e
	p := &ClusterPlan{Addresses: []string{"10.0.0.1"}}
	m.plan = p
	exports := []Export{{UUID: u, Device: "/dev/ublkb7"}, {UUID: other, Device: "/dev/ublkb8"}}
	if _, err := m.x.withANA(ctx, exports, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	b.setHook = func(req backend.ANARequest) error {
		if len(e.calls) != 0 {
			t.Errorf("ANA state set after engine calls %q", e.calls)
		}
		return nil
	}
	if _, err := m.DrainEngine(ctx, u); err != nil {
		t.Fatal(err)
	}
	b.setHook = nil
	if got := b.anaCalls(); len(got) != 1 || got[0].State != ANAInaccessible || got[0].NQN != volid.NQN(u) {
		t.Fatalf("ANA calls %+v, want %s inaccessible", got, volid.NQN(u))
	}
	if !slices.Equal(e.calls, []string{"freeze", "handoff", "flush"}) {
		t.Fatalf("engine calls %q, want freeze, handoff, flush", e.calls)
	}
	// Drain forces inaccessible even when SetANAState says otherwise;
	// the other volume keeps optimized.
	m.SetANAState(ctx, u, ANAOptimized)
	p.Drain = [][16]byte{u}
	ex, err := m.x.withANA(ctx, exports, 0, 0, p.Drain)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ex {
		want := ANAOptimized
		if x.UUID == u {
			want = ANAInaccessible
		}
		if x.ANAState != want {
			t.Errorf("%s: %s while draining %s, want %s", volid.Format(x.UUID), x.ANAState, volid.Format(u), want)
		}
	}
	// What the last converge applied and found.
	m.x.noteExported(ClusterExportSpec(ex[:1], []ExportHost{{NQN: "nqn.h"}}, false, p.Addresses, 0))
	if !m.Exported(u) || m.Exported(other) {
		t.Fatalf("exported: %v %v, want only %s", m.Exported(u), m.Exported(other), volid.Format(u))
	}
	m.x.notePaths([]nvmf.Controller{
		{SubsystemNQN: volid.NQN(u), State: "live", Address: nvmf.Address{TrAddr: "10.0.0.2"}},
		{SubsystemNQN: volid.NQN(u), State: "connecting", Address: nvmf.Address{TrAddr: "10.0.0.1"}},
		{SubsystemNQN: "nqn.other", State: "live"},
	})
	ps := m.consumerPaths([]Consumer{{UUID: u}, {UUID: other}})
	if len(ps[u]) != 2 || ps[u][0] != (ConsumerPath{"10.0.0.2", "live"}) || ps[u][1] != (ConsumerPath{"10.0.0.1", "connecting"}) || len(ps[other]) != 0 {
		t.Fatalf("consumer paths %+v", ps)
	}
}
