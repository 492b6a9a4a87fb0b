package volmgr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/volid"
)

// Member removal (udev "remove", as mdadm --incremental --fail): the
// daemon is told that a block device went away, and every running engine
// that holds it as a member records the member failed as missing at once,
// instead of at the next I/O error on it. The member returns by itself,
// with a resync of what was written meanwhile, when its drive is found
// again (reAddReturning).

// memberRemover is an engine that records a member's device as removed.
type memberRemover interface {
	Removed(slot int) error
}

// Removed implements memberRemover.
func (l *Local) Removed(slot int) error {
	if err := l.vol.MemberRemoved(slot); err != nil {
		return fmt.Errorf("volume %s: member removed: %w", l.vol.Name(), err)
	}
	return nil
}

// Removed implements memberRemover.
func (c *child) Removed(slot int) error {
	return c.call("POST", "/removed", engineReq{Slot: slot}, nil)
}

// ErrStillPresent is returned by MemberRemoved for a device that is still
// there (a synthetic remove event).
var ErrStillPresent = errors.New("device still present, not removed")

// removedGrace is how long MemberRemoved waits for the device to leave
// sysfs: the kernel sends the remove uevent just before it deletes the
// device's sysfs directory.
const removedGrace = time.Second

// MemberRemoved handles a remove event for the block device dev
// (/dev/NAME). A device still in sysfs after removedGrace is not gone (a
// synthetic "udevadm trigger --action=remove"): nothing changes. Else every
// engine holding dev as a member that is not failed records it failed as
// missing. It returns what was done ("" when dev is no running volume's
// member).
func (m *Manager) MemberRemoved(dev string) (string, error) {
	name := filepath.Base(filepath.Clean(dev))
	if name == "." || name == "/" || name == "" {
		return "", fmt.Errorf("%w: device %q", ErrInvalid, dev)
	}
	dev = "/dev/" + name
	sys := filepath.Join(m.opts.Sysfs, "class", "block", name)
	for deadline := time.Now().Add(removedGrace); ; {
		if _, err := os.Stat(sys); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%w: %s (%s exists); nothing changed", ErrStillPresent, dev, sys)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.mu.Lock()
	engines := map[[16]byte]Engine{}
	for u, e := range m.engines {
		engines[u] = e
	}
	m.mu.Unlock()
	var done []string
	var errs []error
	for u, e := range engines {
		st, err := e.Status()
		if err != nil || st.Frozen {
			// A frozen engine (self-fenced, or handed over) writes no
			// metadata; whoever runs the volume next finds the member.
			continue
		}
		for _, ms := range st.Engine.Members {
			if ms.Device != dev || ms.Role == superblock.RoleFailed {
				continue
			}
			r, ok := e.(memberRemover)
			if !ok {
				errs = append(errs, fmt.Errorf("volume %s: engine cannot record a removed member", st.Engine.Name))
				continue
			}
			m.log.Warn("member device removed; failing it as missing", "volume", st.Engine.Name, "uuid", volid.Format(u), "slot", ms.Slot, "device", dev)
			if err := r.Removed(ms.Slot); err != nil {
				errs = append(errs, err)
				continue
			}
			done = append(done, fmt.Sprintf("volume %s slot %d: %s failed as missing", st.Engine.Name, ms.Slot, dev))
		}
	}
	if len(done) == 0 && len(errs) == 0 {
		return "", nil
	}
	return strings.Join(done, "; "), errors.Join(errs...)
}
