package volmgr

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
)

// removingEngine records Removed calls.
type removingEngine struct {
	fakeEngine
	removed []int
}

func (r *removingEngine) Status() (EngineStatus, error) { return r.st, nil }
func (r *removingEngine) Removed(slot int) error {
	r.removed = append(r.removed, slot)
	return nil
}

// A removed device is failed as missing in the engine that holds it as an
// active member; a device that is no member, a member already failed and a
// device still in sysfs (a synthetic event) change nothing.
func TestMemberRemoved(t *testing.T) {
	sys := t.TempDir()
	os.MkdirAll(filepath.Join(sys, "class", "block", "vdb"), 0o755)
	e := &removingEngine{}
	e.st.Engine.Name = "vol0"
	for i, d := range []string{"/dev/vda", "/dev/vdb", "/dev/vdc", "/dev/vdd"} {
		ms := engine.MemberStatus{Slot: i, Device: d, Role: superblock.RoleActive}
		if i == 3 {
			ms.Role, ms.Failure = superblock.RoleFailed, superblock.FailIO
		}
		e.st.Engine.Members = append(e.st.Engine.Members, ms)
	}
	m := &Manager{log: slog.New(slog.DiscardHandler), opts: Options{Sysfs: sys}, engines: map[[16]byte]Engine{{1}: e}}
	done, err := m.MemberRemoved("/dev/vdc")
	if err != nil || !strings.Contains(done, "volume vol0 slot 2: /dev/vdc failed as missing") || !slices.Equal(e.removed, []int{2}) {
		t.Fatalf("remove vdc: %q %v, removed %v", done, err, e.removed)
	}
	for _, dev := range []string{"/dev/vdx", "/dev/vdd"} {
		if done, err := m.MemberRemoved(dev); done != "" || err != nil || len(e.removed) != 1 {
			t.Fatalf("remove %s: %q %v, removed %v", dev, done, err, e.removed)
		}
	}
	if done, err := m.MemberRemoved("/dev/vdb"); !errors.Is(err, ErrStillPresent) || done != "" || len(e.removed) != 1 {
		t.Fatalf("synthetic remove of vdb: %q %v, removed %v", done, err, e.removed)
	}
}
