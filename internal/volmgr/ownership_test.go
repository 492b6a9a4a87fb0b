package volmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/engine"
)

// epochEngine is an engine double with an owner epoch and a freeze gate
// over the engine socket (the way child and systemd engines are reached).
type epochEngine struct {
	protoEngine
	epoch     uint64
	frozen    bool
	thawFence bool // Thaw finds a newer owner's superblock
}

func (f *epochEngine) Status() (EngineStatus, error) {
	return EngineStatus{Engine: engine.Status{Name: "v", Epoch: f.epoch}, Frozen: f.frozen}, nil
}
func (f *epochEngine) Flush() error  { f.record("flush"); return nil }
func (f *epochEngine) Freeze() error { f.record("freeze"); f.frozen = true; return nil }
func (f *epochEngine) HandOff() error {
	if !f.frozen {
		return engine.ErrNotFrozen
	}
	f.record("handoff")
	return nil
}
func (f *epochEngine) Thaw(e uint64) error {
	f.record(fmt.Sprint("thaw ", e))
	if f.thawFence {
		return fmt.Errorf("thaw: %w", engine.ErrFenced)
	}
	f.epoch, f.frozen = e, false
	return nil
}

// An engine not at the held epoch (adopted, or frozen by a self-fence) is
// frozen and thawed at it through the engine protocol; one that a newer
// owner fenced is reported fenced; one at the epoch is left alone.
func TestMatchEpoch(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	check := func(f *epochEngine, planned uint64, wantCalls []string, wantFenced bool) {
		t.Helper()
		sock, _ := serveSocket(t, engineMux(f, "v", func() {}, func() {}))
		c := newChild(sock)
		st, err := c.Status()
		if err != nil {
			t.Fatal(err)
		}
		err = m.matchEpoch(c, st, &onDisk{name: "v", epoch: planned})
		if errors.Is(err, engine.ErrFenced) != wantFenced {
			t.Errorf("engine at %d, planned %d: %v, fenced want %v", st.Engine.Epoch, planned, err, wantFenced)
		}
		if !wantFenced && err != nil {
			t.Errorf("engine at %d, planned %d: %v", st.Engine.Epoch, planned, err)
		}
		if !slices.Equal(f.calls, wantCalls) {
			t.Errorf("engine at %d, planned %d: calls %q, want %q", st.Engine.Epoch, planned, f.calls, wantCalls)
		}
	}
	check(&epochEngine{epoch: 9}, 9, nil, false)
	check(&epochEngine{epoch: 5}, 9, []string{"freeze", "thaw 9"}, false)
	check(&epochEngine{epoch: 9, frozen: true}, 12, []string{"freeze", "thaw 12"}, false)
	check(&epochEngine{epoch: 5, thawFence: true}, 9, []string{"freeze", "thaw 9"}, true)
	check(&epochEngine{epoch: 10}, 9, nil, true)
}

// FreezeAll reaches every engine.
func TestFreezeAll(t *testing.T) {
	a, b := &epochEngine{epoch: 3}, &epochEngine{epoch: 4}
	m := &Manager{log: slog.New(slog.DiscardHandler), engines: map[[16]byte]Engine{{1}: a, {2}: b}}
	if err := m.FreezeAll(); err != nil {
		t.Fatal(err)
	}
	if !a.frozen || !b.frozen {
		t.Fatalf("frozen: %v %v, want both", a.frozen, b.frozen)
	}
}
