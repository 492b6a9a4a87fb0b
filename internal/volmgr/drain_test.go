package volmgr

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// drainEngine is an engine double whose ublk device is ublkb7.
type drainEngine struct{ epochEngine }

func (f *drainEngine) Status() (EngineStatus, error) {
	st, err := f.epochEngine.Status()
	st.UblkPath = "/dev/ublkb7"
	return st, err
}

// DrainEngine turns the export inaccessible first, waits until the ublk
// device has no request in flight, then flushes and freezes; the plan's
// Drain volumes stay inaccessible in every later reconcile, whatever
// SetANAState said; the last reconcile's exports and controllers are
// reported.
func TestDrainEngine(t *testing.T) {
	ctx := context.Background()
	u, other := [16]byte{1}, [16]byte{2}
	sys := t.TempDir()
	dir := filepath.Join(sys, "class", "block", "ublkb7")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	inflight := filepath.Join(dir, "inflight")
	os.WriteFile(inflight, []byte("       0        3\n"), 0o644)
	b := &anaBackend{}
	m := &Manager{x: &exporter{target: b}, log: slog.New(slog.DiscardHandler), opts: Options{Sysfs: sys},
		engines: map[[16]byte]Engine{}}
	e := &drainEngine{}
	m.engines[u] = e
	p := &ClusterPlan{Addresses: []string{"10.0.0.1"}}
	m.plan = p
	exports := []Export{{UUID: u, Device: "/dev/ublkb7"}, {UUID: other, Device: "/dev/ublkb8"}}
	if _, err := m.x.withANA(ctx, exports, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	// The device stays busy until the export is inaccessible and the
	// test lets it go idle.
	done := make(chan error, 1)
	go func() { _, err := m.DrainEngine(ctx, u); done <- err }()
	for len(b.anaCalls()) == 0 {
		select {
		case err := <-done:
			t.Fatalf("drained before the ANA state changed: %v", err)
		default:
		}
	}
	if got := b.anaCalls(); got[0].State != ANAInaccessible || got[0].NQN != volid.NQN(u) {
		t.Fatalf("first ANA call %+v, want %s inaccessible", got[0], volid.NQN(u))
	}
	if len(e.calls) != 0 {
		t.Fatalf("engine calls %q while the device was busy", e.calls)
	}
	// Renamed into place: DrainEngine polls the file, and a rewrite in
	// place can be read empty between truncate and write.
	tmp := inflight + ".new"
	os.WriteFile(tmp, []byte("       0        0\n"), 0o644)
	if err := os.Rename(tmp, inflight); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.calls, []string{"flush", "freeze"}) {
		t.Fatalf("engine calls %q, want flush, freeze", e.calls)
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
