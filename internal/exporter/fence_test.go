package exporter

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// memTarget is a target backend in memory: Apply replaces the exports
// (unless frozen: a target that reports success and changes nothing) and
// records each request.
type memTarget struct {
	exports []backend.Export
	applied [][]backend.Export
	frozen  bool
	noAuth  bool // a target without DH-HMAC-CHAP
}

func (m *memTarget) Features(context.Context) (backend.Features, error) {
	return backend.Features{Name: "mem", Auth: !m.noAuth}, nil
}

func (m *memTarget) Apply(_ context.Context, req backend.ApplyRequest) (backend.ApplyResult, error) {
	m.applied = append(m.applied, req.Exports)
	if !m.frozen {
		m.exports = slices.Clone(req.Exports)
	}
	return backend.ApplyResult{Changed: true}, nil
}

func (m *memTarget) List(_ context.Context, scope string) ([]backend.Export, error) {
	return slices.Clone(m.exports), nil
}

func (m *memTarget) SetANAState(context.Context, backend.ANARequest) error { return nil }
func (m *memTarget) Remove(context.Context, string) error                  { return nil }

// listened is the set of export NQNs with a listener in exports.
func listened(exports []backend.Export) []string {
	var out []string
	for _, e := range exports {
		if len(e.Listeners) > 0 {
			out = append(out, strings.TrimPrefix(e.NQN, NQNPrefix))
		}
	}
	slices.Sort(out)
	return out
}

// restartInput: this node restarts (daemon restart: the kernel still holds
// the exports made for the old owner B of v1, d1 and d2). etcd now says
// C holds v1's owner key at epoch 9, and v2 (d3, new) is owned by C too.
func restartInput() (old nvmet.Spec, in Input) {
	in = base()
	old = Desire(in, auth).Spec
	in.Volumes[0].Owner, in.Volumes[0].Epoch = Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}, 9
	in.Volumes = append(in.Volumes, Volume{UUID: "v2", Owner: Host{NQN: hostC, Secret: nvmf.SecretText(keyC)}, Epoch: 11, Members: []string{"d3"}})
	return old, in
}

// TestRestartFencesBeforeExporting: after a daemon restart the first thing
// applied tears down the exports whose owner no longer holds the key
// (unlinked from every port) and makes nothing new reachable; only then
// are the drives linked for the key holder. Reconcile succeeds only once
// the state read back serves nobody but the owners.
func TestRestartFencesBeforeExporting(t *testing.T) {
	old, in := restartInput()
	m := &memTarget{exports: pnvmet.FromSpec(old)}
	x := &Exporter{Target: m}
	res, err := x.Reconcile(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Fenced, []string{"d1", "d2"}) {
		t.Errorf("fenced %v, want [d1 d2]", res.Fenced)
	}
	if len(m.applied) != 2 {
		t.Fatalf("%d applies, want the fence step and the desired state", len(m.applied))
	}
	if got := listened(m.applied[0]); len(got) != 0 {
		t.Errorf("the fence step leaves or makes %v reachable; want nothing linked", got)
	}
	for _, e := range m.applied[0] {
		for _, h := range e.Hosts {
			if h.NQN == hostB {
				t.Errorf("the fence step still allows the old owner on %s", e.NQN)
			}
		}
	}
	if got := listened(m.exports); !reflect.DeepEqual(got, []string{"d1", "d2", "d3"}) {
		t.Errorf("after Reconcile %v are linked, want d1 d2 d3", got)
	}
	// Converged: the next Reconcile fences nothing and applies the same state.
	m.applied = nil
	if res, err := x.Reconcile(context.Background(), in); err != nil || len(res.Fenced) != 0 || len(m.applied) != 1 {
		t.Errorf("second Reconcile: fenced %v, %d applies, %v", res.Fenced, len(m.applied), err)
	}
}

// TestRestartNoOwnerKey: a volume whose owner key is gone (Owner empty) is
// exported to nobody: its drives are unlinked first, and stay down.
func TestRestartNoOwnerKey(t *testing.T) {
	in := base()
	old := Desire(in, auth).Spec
	in.Volumes[0].Owner, in.Volumes[0].Epoch = Host{}, 0
	m := &memTarget{exports: pnvmet.FromSpec(old)}
	res, err := (&Exporter{Target: m}).Reconcile(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Fenced, []string{"d1", "d2"}) || len(m.exports) != 0 {
		t.Errorf("fenced %v, left %+v; want d1 d2 fenced and nothing exported", res.Fenced, m.exports)
	}
	if got := listened(m.applied[0]); len(got) != 0 {
		t.Errorf("the fence step leaves %v linked", got)
	}
}

// TestRebootExportsOnlyDesired: after a reboot the kernel holds nothing;
// there is nothing to fence and the drives go to the key holder at once.
func TestRebootExportsOnlyDesired(t *testing.T) {
	_, in := restartInput()
	m := &memTarget{}
	res, err := (&Exporter{Target: m}).Reconcile(context.Background(), in)
	if err != nil || len(res.Fenced) != 0 || len(m.applied) != 1 {
		t.Fatalf("fenced %v, %d applies, %v", res.Fenced, len(m.applied), err)
	}
	for _, e := range m.exports {
		if len(e.Hosts) != 1 || e.Hosts[0].NQN != hostC {
			t.Errorf("%s allows %+v, want C only", e.NQN, e.Hosts)
		}
	}
}

// TestReconcileReadsBack: a target that reports success but keeps the old
// owner's exports makes Reconcile fail (the caller must not acknowledge).
func TestReconcileReadsBack(t *testing.T) {
	old, in := restartInput()
	m := &memTarget{exports: pnvmet.FromSpec(old), frozen: true}
	_, err := (&Exporter{Target: m}).Reconcile(context.Background(), in)
	if err == nil || !strings.Contains(err.Error(), "read back") || !strings.Contains(err.Error(), NQN("d1")) {
		t.Fatalf("Reconcile on a target that ignored it: %v; want a read-back error naming d1", err)
	}
}
