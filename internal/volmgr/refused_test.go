package volmgr

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestRefusedExportsNothing: with ClusterPlan.Refused (require_auth and
// no DH-HMAC-CHAP) the volume exports are applied empty, so the ones the
// target still holds (made unauthenticated before a restart) are gone and
// none is made; without it the same plan exports; Info says refused and
// the "exports unauthenticated" warning is not logged.
func TestRefusedExportsNothing(t *testing.T) {
	ctx := context.Background()
	u := [16]byte{1}
	exports := []Export{{UUID: u, Device: "/dev/ublkb0"}}
	hosts := []ExportHost{{NQN: "nqn.h"}}
	p := &ClusterPlan{Hosts: hosts, Addresses: []string{"10.0.0.1"}}
	b := &anaBackend{}
	x := &exporter{target: b, sysfs: nvmf.Sysfs{Root: t.TempDir()}}
	if _, err := x.reconcileCluster(ctx, exports, p); err != nil || len(b.exports) != 1 || b.exports[0].NQN != volid.NQN(u) {
		t.Fatalf("require_auth = false: %v, exports %+v; want u exported by host NQN", err, b.exports)
	}
	p.Refused = "exports refused: no DH-HMAC-CHAP"
	if _, err := x.reconcileCluster(ctx, exports, p); err != nil || len(b.exports) != 0 {
		t.Fatalf("refused: %v, exports left %+v; want none", err, b.exports)
	}
	if got := exportAuth(p); got != api.ExportAuthRefused {
		t.Errorf("export auth %q, want %q", got, api.ExportAuthRefused)
	}
	var logged strings.Builder
	m := &Manager{log: slog.New(slog.NewTextHandler(&logged, nil))}
	m.warnUnauthenticated(p)
	if logged.Len() > 0 {
		t.Errorf("refused plan logged the unauthenticated warning:\n%s", logged.String())
	}
}
