package volmgr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/plugins/backend"
)

func TestAssignANAGroups(t *testing.T) {
	g := AssignANAGroups([]string{"c", "a", "b", "a"}, nil)
	if len(g) != 3 || g["a"] != 2 || g["b"] != 3 || g["c"] != 4 {
		t.Fatalf("fresh: %v", g)
	}
	// Kept groups stay, a removed volume's group is reused by a new one,
	// out-of-range and duplicate previous groups are reassigned.
	g = AssignANAGroups([]string{"c", "d", "e", "f"}, map[string]uint32{"a": 2, "c": 4, "d": 1, "e": 4, "f": 200})
	if g["c"] != 4 || g["d"] != 2 || g["e"] != 3 || g["f"] != 5 {
		t.Fatalf("kept: %v", g)
	}
	// The same set in another order gives the same groups.
	if h := AssignANAGroups([]string{"f", "e", "d", "c"}, map[string]uint32{"a": 2, "c": 4, "d": 1, "e": 4, "f": 200}); fmt.Sprint(h) != fmt.Sprint(g) {
		t.Fatalf("order matters: %v vs %v", h, g)
	}
	// 127 groups; the 128th volume shares group 1.
	var many []string
	for i := 0; i < 128; i++ {
		many = append(many, fmt.Sprintf("v%03d", i))
	}
	g = AssignANAGroups(many, nil)
	seen := map[uint32]bool{}
	for _, n := range many[:127] {
		if g[n] < 2 || g[n] > 128 || seen[g[n]] {
			t.Fatalf("%s: group %d", n, g[n])
		}
		seen[g[n]] = true
	}
	if g[many[127]] != 0 {
		t.Fatalf("128th volume: group %d, want 0 (shared)", g[many[127]])
	}
}

func TestCntlIDRange(t *testing.T) {
	prevHi := uint16(0)
	for b := 1; b <= 65; b++ {
		lo, hi := CntlIDRange(b)
		if lo != prevHi+1 || hi < lo || hi > 0xffef {
			t.Fatalf("block %d: %d..%d after %d", b, lo, hi, prevHi)
		}
		prevHi = hi
	}
	if lo, _ := CntlIDRange(66); lo != 1 {
		t.Fatalf("block 66 wraps to block 1's range, got %d", lo)
	}
	if lo, hi := CntlIDRange(0); lo != 0 || hi != 0 {
		t.Fatalf("block 0 (none claimed): %d..%d, want 0..0", lo, hi)
	}
}

// anaBackend records what the exporter asks of the target.
type anaBackend struct {
	mu      sync.Mutex // ana (SetANAState may run on another goroutine)
	exports []backend.Export
	ana     []backend.ANARequest
	listErr error
	noRange bool
	// setHook, when set, answers SetANAState (nil: success).
	setHook func(backend.ANARequest) error
}

func (b *anaBackend) Features(context.Context) (backend.Features, error) {
	return backend.Features{Name: "fake", ANA: true, CntlIDRange: !b.noRange}, nil
}
func (b *anaBackend) Apply(_ context.Context, req backend.ApplyRequest) (backend.ApplyResult, error) {
	b.exports = req.Exports
	return backend.ApplyResult{Changed: true}, nil
}
func (b *anaBackend) List(context.Context, string) ([]backend.Export, error) {
	return b.exports, b.listErr
}
func (b *anaBackend) SetANAState(_ context.Context, req backend.ANARequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ana = append(b.ana, req)
	if b.setHook != nil {
		return b.setHook(req)
	}
	return nil
}

func (b *anaBackend) anaCalls() []backend.ANARequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ana)
}
func (b *anaBackend) Remove(context.Context, string) error { return nil }

// The exports of a cluster node carry a group per volume, kept across
// restarts (read from the actual exports), the node's controller ids, and
// the state SetANAState set, in every later reconcile.
func TestExportANA(t *testing.T) {
	ctx := context.Background()
	u1, u2, u3 := [16]byte{1}, [16]byte{2}, [16]byte{3}
	prev := &anaBackend{exports: []backend.Export{{NQN: volid.NQN(u2), Namespaces: []backend.Namespace{{NSID: 1, ANAGroup: 2}}}}}
	m := &Manager{x: &exporter{target: prev}}
	p := &ClusterPlan{Addresses: []string{"10.0.0.1", "10.0.1.1"}, CntlIDMin: 1001, CntlIDMax: 2000}
	m.plan = p
	if err := m.SetANAState(ctx, u1, ANAInaccessible); !errors.Is(err, ErrNotExported) {
		t.Fatalf("before any export: %v, want ErrNotExported", err)
	}
	exports := []Export{{UUID: u1, Device: "/dev/ublkb0"}, {UUID: u2, Device: "/dev/ublkb1"}}
	withANA := func() []backend.Export {
		t.Helper()
		ex, err := m.x.withANA(ctx, exports, p.CntlIDMin, p.CntlIDMax, p.Drain)
		if err != nil {
			t.Fatal(err)
		}
		s := ClusterExportSpec(ex, []ExportHost{{NQN: "nqn.h"}}, false, p.Addresses, 0)
		prev.exports = s
		return s
	}
	s := withANA()
	byNQN := map[string]backend.Export{}
	for _, e := range s {
		byNQN[e.NQN] = e
	}
	e1, e2 := byNQN[volid.NQN(u1)], byNQN[volid.NQN(u2)]
	if e2.Namespaces[0].ANAGroup != 2 || e1.Namespaces[0].ANAGroup != 3 {
		t.Fatalf("groups: u1 %d, u2 %d; want 3 and 2 (u2 keeps its actual group)", e1.Namespaces[0].ANAGroup, e2.Namespaces[0].ANAGroup)
	}
	for _, e := range s {
		g := e.Namespaces[0].ANAGroup
		if e.CntlIDMin != 1001 || e.CntlIDMax != 2000 || len(e.Listeners) != 2 {
			t.Fatalf("%s: %+v", e.NQN, e)
		}
		for _, l := range e.Listeners {
			if len(l.ANAStates) != 1 || l.ANAStates[g] != ANAOptimized {
				t.Fatalf("%s listener %s: ANA %v, want group %d optimized", e.NQN, l.Address, l.ANAStates, g)
			}
		}
	}

	if err := m.SetANAState(ctx, u1, "offline"); err == nil || !strings.Contains(err.Error(), "offline") {
		t.Fatalf("bad state: %v", err)
	}
	if err := m.SetANAState(ctx, u1, ANAInaccessible); err != nil {
		t.Fatal(err)
	}
	if len(prev.ana) != 2 || prev.ana[0].Group != 3 || prev.ana[0].State != ANAInaccessible || prev.ana[0].NQN != volid.NQN(u1) ||
		prev.ana[1].Listener.Address != "10.0.1.1" || prev.ana[1].Listener.ServiceID != "4420" {
		t.Fatalf("SetANAState calls %+v", prev.ana)
	}
	// A reconcile keeps it; the other volume is untouched.
	for _, e := range withANA() {
		want := ANAOptimized
		if e.NQN == volid.NQN(u1) {
			want = ANAInaccessible
		}
		if st := e.Listeners[0].ANAStates[e.Namespaces[0].ANAGroup]; st != want {
			t.Fatalf("%s after reconcile: %s, want %s", e.NQN, st, want)
		}
	}
	// u1 stops being exported: its state is forgotten; a new volume takes
	// the freed group and starts optimized, u1 exported again starts
	// optimized too.
	exports = []Export{{UUID: u2, Device: "/dev/ublkb1"}, {UUID: u3, Device: "/dev/ublkb2"}}
	withANA()
	exports = append(exports, Export{UUID: u1, Device: "/dev/ublkb0"})
	for _, e := range withANA() {
		if st := e.Listeners[0].ANAStates[e.Namespaces[0].ANAGroup]; st != ANAOptimized {
			t.Fatalf("%s: %s after re-export, want optimized", e.NQN, st)
		}
		if e.NQN == volid.NQN(u3) && e.Namespaces[0].ANAGroup != 3 {
			t.Fatalf("u3 group %d, want the freed 3", e.Namespaces[0].ANAGroup)
		}
	}

	// A backend without ranges (SPDK) gets none.
	nr := &Manager{x: &exporter{target: &anaBackend{noRange: true}}}
	if ex, err := nr.x.withANA(ctx, exports, 1001, 2000, nil); err != nil || ex[0].CntlIDMin != 0 || ex[0].CntlIDMax != 0 {
		t.Fatalf("no-range backend: %+v, %v", ex, err)
	}
	// One-node mode: no cluster plan, refused.
	m.plan = nil
	if err := m.SetANAState(ctx, u2, ANAOptimized); err == nil {
		t.Fatal("SetANAState without a cluster plan")
	}
	// The actual exports cannot be read: no export is planned blind.
	bad := &Manager{x: &exporter{target: &anaBackend{listErr: errors.New("plugin down")}}}
	if _, err := bad.x.withANA(ctx, exports, 0, 0, nil); err == nil || !strings.Contains(err.Error(), "plugin down") {
		t.Fatalf("List error: %v", err)
	}
}
