package volmgr

import (
	"reflect"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmf"
)

// TestOldPathsKeptUntilNewLive: after an owner change the consumer's
// controller to the old owner is not disconnected before the connects,
// and only once the new owner's path is live.
func TestOldPathsKeptUntilNewLive(t *testing.T) {
	const v, w = "nqn.2026-11.io.fabraid:vol:v", "nqn.2026-11.io.fabraid:vol:w"
	desired := []nvmf.Options{{NQN: v, Address: "10.0.0.b", ServiceID: "4420"}}
	ctrl := func(name, nqn, addr, state string) nvmf.Controller {
		return nvmf.Controller{Name: name, SubsystemNQN: nqn, State: state, Address: nvmf.Address{TrAddr: addr, TrSvcID: "4420"}}
	}
	old := ctrl("nvme1", v, "10.0.0.a", "connecting")
	gone := ctrl("nvme2", w, "10.0.0.a", "live") // w is not desired any more
	now, later := splitOldPaths([]string{"nvme1", "nvme2"}, desired, []nvmf.Controller{old, gone})
	if !reflect.DeepEqual(now, []string{"nvme2"}) || !reflect.DeepEqual(later, []string{"nvme1"}) {
		t.Fatalf("now %q later %q, want nvme2 now, nvme1 deferred", now, later)
	}
	// The new path is connecting: the old one stays.
	if got := oldPathsToDrop(later, desired, []nvmf.Controller{old, ctrl("nvme3", v, "10.0.0.b", "connecting")}); len(got) != 0 {
		t.Errorf("new path not live: dropped %q", got)
	}
	// A live path at another, undesired address does not count.
	if got := oldPathsToDrop(later, desired, []nvmf.Controller{old, ctrl("nvme3", v, "10.0.0.c", "live")}); len(got) != 0 {
		t.Errorf("live path at an undesired address: dropped %q", got)
	}
	if got := oldPathsToDrop(later, desired, []nvmf.Controller{old, ctrl("nvme3", v, "10.0.0.b", "live")}); !reflect.DeepEqual(got, []string{"nvme1"}) {
		t.Errorf("new path live: dropped %q, want nvme1", got)
	}
}
