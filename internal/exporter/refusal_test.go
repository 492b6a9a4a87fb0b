package exporter

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmet"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// TestRefusal: a target without DH-HMAC-CHAP exports nothing unless
// require_auth = false; the reason names the kernel option and the
// opt-out.
func TestRefusal(t *testing.T) {
	for _, tc := range []struct{ auth, allow, refused bool }{
		{true, false, false}, {true, true, false}, {false, true, false}, {false, false, true},
	} {
		err := Refusal(tc.auth, tc.allow)
		if (err != nil) != tc.refused || err != nil && !errors.Is(err, ErrAuthRequired) {
			t.Errorf("Refusal(auth %v, allow unauthenticated %v) = %v, want refused %v", tc.auth, tc.allow, err, tc.refused)
		}
	}
	msg := Refusal(false, false).Error()
	for _, w := range []string{"CONFIG_NVME_TARGET_AUTH", "require_auth = false", "no drives and no volumes"} {
		if !strings.Contains(msg, w) {
			t.Errorf("refusal %q lacks %q", msg, w)
		}
	}
	d := Desire(base(), nvmet.Features{})
	if !errors.Is(d.Refused, ErrAuthRequired) || !reflect.DeepEqual(d.Spec, nvmet.Spec{}) || d.Exports != nil || d.Problems != nil {
		t.Errorf("Desire without auth: %+v; want refused, nothing exported", d)
	}
}

// TestRefusalLeavesNothing: on a target without DH-HMAC-CHAP that still
// holds unauthenticated drive exports (made with require_auth = false
// before a restart), Reconcile with require_auth fences them first, removes
// them, creates nothing at any step, and returns the refusal without an
// error (nothing is exported to anybody, so the fence may be acknowledged).
func TestRefusalLeavesNothing(t *testing.T) {
	in := base()
	in.AllowUnauthenticated = true
	old := Desire(in, nvmet.Features{})
	if old.Refused != nil || len(old.Spec.Subsystems) != 2 {
		t.Fatalf("require_auth = false: %+v", old)
	}
	m := &memTarget{exports: pnvmet.FromSpec(old.Spec), noAuth: true}
	x := &Exporter{Target: m}
	in.AllowUnauthenticated = false
	res, err := x.Reconcile(context.Background(), in)
	if err != nil || !errors.Is(res.Refused, ErrAuthRequired) || res.Auth || len(res.Exports) > 0 {
		t.Fatalf("Reconcile: %v, refused %v, auth %v, exports %v", err, res.Refused, res.Auth, res.Exports)
	}
	if len(m.exports) != 0 {
		t.Errorf("drive exports left behind: %+v", m.exports)
	}
	if !reflect.DeepEqual(res.Fenced, []string{"d1", "d2"}) {
		t.Errorf("fenced %v, want d1 d2 (their controllers torn down first)", res.Fenced)
	}
	for i, a := range m.applied {
		if len(a) != 0 {
			t.Errorf("apply %d asked for exports %+v", i, a)
		}
	}
	// A node that never exported: nothing is asked of the target but the
	// empty state, and a second reconcile changes nothing.
	m2 := &memTarget{noAuth: true}
	x2 := &Exporter{Target: m2}
	for range 2 {
		if res, err := x2.Reconcile(context.Background(), in); err != nil || res.Refused == nil || len(m2.exports) != 0 {
			t.Fatalf("fresh node: %v %v %+v", err, res.Refused, m2.exports)
		}
	}
}
