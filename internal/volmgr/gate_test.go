package volmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/volid"
)

// gateVolume is a 2+1 volume "g" as the scan sees it with the drives of
// the given slots present.
func gateVolume(present ...int) ([16]byte, *onDisk) {
	u := [16]byte{7}
	members := make([]superblock.Member, 3)
	for i := range members {
		members[i] = superblock.Member{UUID: [16]byte{byte(i + 1)}, Role: superblock.RoleActive}
	}
	var found []scanned
	for _, s := range present {
		sb := &superblock.Superblock{VolumeUUID: u, Name: "g", Events: 5, Slot: s, MemberUUID: members[s].UUID,
			Geometry: layout.Geometry{K: 2, M: 1, Groups: 1, ChunkSize: 4096, Rows: 16},
			Members:  append([]superblock.Member(nil), members...)}
		found = append(found, scanned{fmt.Sprintf("/dev/d%d", s), sb})
	}
	return u, groupVolumes(found)[u]
}

// gateManager is a Manager with a settable clock whose wake-ups are
// recorded, not run.
type gateManager struct {
	*Manager
	now   time.Time
	wakes []time.Duration
}

func newGateManager(t *testing.T, owner func([16]byte) (bool, error)) *gateManager {
	g := &gateManager{now: time.Unix(1e6, 0)}
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	g.Manager = &Manager{log: slog.New(slog.DiscardHandler),
		opts:    Options{Config: cfg, Owner: owner, Kick: func() {}},
		engines: map[[16]byte]Engine{}, names: map[[16]byte]string{}, errs: map[[16]byte]error{}, heads: map[[16]byte]string{}}
	g.gate.now = func() time.Time { return g.now }
	g.gate.afterFunc = func(d time.Duration, _ func()) func() {
		g.wakes = append(g.wakes, d)
		return func() {}
	}
	return g
}

// check runs the gate at `at` after the first call and returns whether it
// lets the volume start, with the state and error volume show prints.
func (g *gateManager) check(t *testing.T, u [16]byte, v *onDisk, at time.Duration) (bool, api.Volume) {
	t.Helper()
	g.now = time.Unix(1e6, 0).Add(at)
	g.names[u] = v.name
	ok := g.mayStart(u, v)
	in, err := g.Info(volid.Format(u))
	if err != nil {
		t.Fatal(err)
	}
	return ok, in
}

// A member missing: the volume waits, says for what and until when, and
// starts (degraded) once the last-resort timeout has passed, not before.
func TestGateWaitsThenStartsDegraded(t *testing.T) {
	g := newGateManager(t, nil)
	u, v := gateVolume(0, 1)
	for _, c := range []struct {
		at     time.Duration
		start  bool
		reason string
	}{
		{0, false, "waiting for 1 of 3 members (slot 2, member 03000000-0000-0000-0000-000000000000); starts degraded in 30s"},
		{18 * time.Second, false, "starts degraded in 12s"},
		{30*time.Second - time.Millisecond, false, "starts degraded in 0s"},
		{30 * time.Second, true, ""},
	} {
		ok, in := g.check(t, u, v, c.at)
		if ok != c.start {
			t.Fatalf("at %v: start %v, want %v (%s: %s)", c.at, ok, c.start, in.State, in.Error)
		}
		if !ok && (in.State != "waiting" || !strings.Contains(in.Error, c.reason) || in.K != 2 || in.M != 1) {
			t.Fatalf("at %v: %+v, want waiting: %q", c.at, in, c.reason)
		}
	}
	// Wake-ups come at most gatePoll apart, and at the deadline.
	if want := []time.Duration{gatePoll, gatePoll, time.Millisecond}; fmt.Sprint(g.wakes) != fmt.Sprint(want) {
		t.Fatalf("wake-ups %v, want %v", g.wakes, want)
	}
}

// All members present: it starts at once, no wake-up.
func TestGateStartsComplete(t *testing.T) {
	g := newGateManager(t, nil)
	u, v := gateVolume(0, 1, 2)
	if ok, in := g.check(t, u, v, 0); !ok {
		t.Fatalf("complete volume waits: %s", in.Error)
	}
	if len(g.wakes) != 0 {
		t.Fatalf("wake-ups %v", g.wakes)
	}
}

// Fewer than K members: it never starts, and says why.
func TestGateNeverBelowK(t *testing.T) {
	g := newGateManager(t, nil)
	u, v := gateVolume(1)
	for _, at := range []time.Duration{0, time.Minute, 1000 * time.Hour} {
		ok, in := g.check(t, u, v, at)
		want := "cannot start: 1 of 3 members present, 2 needed; waiting for 2 of 3 members"
		if ok || in.State != "waiting" || !strings.Contains(in.Error, want) {
			t.Fatalf("at %v: start %v, %s %q; want waiting %q", at, ok, in.State, in.Error, want)
		}
	}
}

// In cluster mode only the owner starts a volume, and a failed owner check
// waits, even for a complete volume.
func TestGateOwner(t *testing.T) {
	var mine bool
	var oerr error
	g := newGateManager(t, func([16]byte) (bool, error) { return mine, oerr })
	u, v := gateVolume(0, 1, 2)
	oerr = errors.New("etcd: context deadline exceeded")
	if ok, in := g.check(t, u, v, time.Hour); ok || !strings.Contains(in.Error, "cannot tell whether this node owns the volume: etcd") {
		t.Fatalf("owner unknown: start %v %q", ok, in.Error)
	}
	oerr = nil
	if ok, in := g.check(t, u, v, time.Hour); ok || !strings.Contains(in.Error, "another node owns the volume") {
		t.Fatalf("not owner: start %v %q", ok, in.Error)
	}
	mine = true
	if ok, in := g.check(t, u, v, time.Hour); !ok {
		t.Fatalf("owner: %q", in.Error)
	}
}
