package scalesim

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
)

// TestScaleSmall: twelve nodes and four 2+1 volumes on a real
// three-member etcd: every volume owned once, the busiest owner's power
// cut and then a rack of three: every volume it owned owned again by
// another node, never two holders, none left without an owner, and no
// node asked etcd whether a lease ended.
func TestScaleSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd members")
	}
	r := run(t, Config{Nodes: 12, DrivesPerNode: 2, Volumes: 4, K: 2, M: 1, Reconcile: 2 * time.Second, Steady: 3 * time.Second,
		NodeLeaseTTL: 10, OwnerTTL: 6 * time.Second, Rack: 3, Attach: 2})
	if r.OneOwnerVolumes == 0 || r.RackVolumes == 0 && r.RackFailover != 0 {
		t.Errorf("failovers moved nothing: %+v", r)
	}
	if r.TwoOwners != 0 || r.UnownedAtEnd != 0 {
		t.Errorf("%d volumes had two owners, %d none at the end", r.TwoOwners, r.UnownedAtEnd)
	}
	if r.LeaseLookups != 0 {
		t.Errorf("%d lease lookups: every node publishes its owner session, so lapses are in the keys read", r.LeaseLookups)
	}
}

// TestScaleSim is the benchmark (make scale): FABRAID_SCALE_NODES nodes
// with 10 drives each and FABRAID_SCALE_VOLUMES 4+2 volumes (default one
// per node), a rack of 20, attach lists of FABRAID_SCALE_ATTACH nodes
// (default none: every node consumes every volume); it prints one SCALE
// JSON line.
func TestScaleSim(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("FABRAID_SCALE_NODES"))
	if nodes == 0 {
		t.Skip("the scale benchmark: make scale (FABRAID_SCALE_NODES=100)")
	}
	vols := nodes
	if v, err := strconv.Atoi(os.Getenv("FABRAID_SCALE_VOLUMES")); err == nil && v > 0 {
		vols = v
	}
	attach, _ := strconv.Atoi(os.Getenv("FABRAID_SCALE_ATTACH"))
	r := run(t, Config{Nodes: nodes, DrivesPerNode: 10, Volumes: vols, K: 4, M: 2, Reconcile: 10 * time.Second, Steady: 60 * time.Second,
		NodeLeaseTTL: 10, OwnerTTL: 6 * time.Second, Rack: 20, Attach: attach})
	b, _ := json.Marshal(r)
	t.Logf("SCALE %s", b)
	if r.TwoOwners != 0 || r.UnownedAtEnd != 0 {
		t.Errorf("%d volumes had two owners, %d none at the end", r.TwoOwners, r.UnownedAtEnd)
	}
}

func run(t *testing.T, c Config) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c.Dir, c.FreePort, c.Log = t.TempDir(), func() int { return etcdtest.FreePort(t) }, t.Logf
	r, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
