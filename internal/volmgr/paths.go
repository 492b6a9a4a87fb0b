package volmgr

import (
	"errors"
	"slices"

	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Consumer paths through an owner change
//
// When a volume's owner changes, its consumers get the new owner's
// address while their controller to the old owner still exists (dead or
// reconnecting: the volume-path profile reconnects forever and the
// multipath head queues I/O while any path is reconnecting). Tearing the
// old path down before the new one is live would leave the head with no
// path: I/O errors, file systems going read-only. So in a cluster the
// connection plan's disconnects of a subsystem that is still desired (at
// another address) are deferred: they run after the connects, and only
// once the subsystem has a live controller at a desired address.

// errConnect is wrapped by a consumer connection that failed (its owner
// is not exporting yet): the daemon reconciles again soon.
var errConnect = errors.New("consumer connection failed")

// splitOldPaths splits the controllers of plan's Disconnect into those to
// disconnect now and old paths of desired subsystems (deferred).
func splitOldPaths(disconnect []string, desired []nvmf.Options, ctrls []nvmf.Controller) (now, later []string) {
	want := map[string]bool{}
	for _, o := range desired {
		want[o.NQN] = true
	}
	for _, name := range disconnect {
		i := slices.IndexFunc(ctrls, func(c nvmf.Controller) bool { return c.Name == name })
		if i >= 0 && want[ctrls[i].SubsystemNQN] {
			later = append(later, name)
			continue
		}
		now = append(now, name)
	}
	return now, later
}

// oldPathsToDrop are the deferred controllers whose subsystem has a live
// controller at a desired address now.
func oldPathsToDrop(later []string, desired []nvmf.Options, ctrls []nvmf.Controller) []string {
	live := map[string]bool{}
	for _, c := range ctrls {
		if c.State != "live" {
			continue
		}
		for _, o := range desired {
			if o.NQN == c.SubsystemNQN && o.Address == c.Address.TrAddr && o.ServiceID == c.Address.TrSvcID {
				live[c.SubsystemNQN] = true
			}
		}
	}
	var out []string
	for _, name := range later {
		i := slices.IndexFunc(ctrls, func(c nvmf.Controller) bool { return c.Name == name })
		if i >= 0 && live[ctrls[i].SubsystemNQN] {
			out = append(out, name)
		}
	}
	return out
}
