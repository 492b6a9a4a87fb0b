package volmgr

import (
	"errors"
	"fmt"

	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/volid"
)

// ErrNotRunning is wrapped by ReplacePlanned when the volume has no
// running engine (yet): nothing was tried.
var ErrNotRunning = errors.New("engine not running")

// ReplacePlanned puts the device at path into failed slot of cluster
// volume u and starts the rebuild: path is the slot's new member, the
// drive the volume record names now (the daemon moved it there in etcd;
// the importer found it). When the engine holds path in slot already and
// the slot is not failed (an earlier call, or the assembly after a
// restart found the replaced member by the record's path) nothing is
// started. It returns the member UUID the engine wrote on path and
// whether this call started the replace.
func (m *Manager) ReplacePlanned(u [16]byte, slot int, path string, rate int64) ([16]byte, bool, error) {
	ref := volid.Format(u)
	_, e, err := m.resolve(ref)
	if e == nil {
		return [16]byte{}, false, fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	st, err := e.Status()
	if err != nil {
		return [16]byte{}, false, err
	}
	var role superblock.Role = superblock.RoleFailed
	dev := ""
	for _, ms := range st.Engine.Members {
		if ms.Slot == slot {
			role, dev = ms.Role, ms.Device
		}
	}
	started := false
	if dev != path || role == superblock.RoleFailed {
		if role != superblock.RoleFailed {
			return [16]byte{}, false, fmt.Errorf("%w: volume %s: replace slot %d: the member there is %s, not failed (fail it first)", ErrInvalid, st.Engine.Name, slot, role)
		}
		if err := e.Replace(slot, path, rate); err != nil {
			return [16]byte{}, false, err
		}
		started = true
	}
	sb := readSuperblock(path)
	if sb == nil || sb.VolumeUUID != u || sb.Slot != slot {
		return [16]byte{}, started, fmt.Errorf("volume %s: replace slot %d: %s does not read back the volume's superblock", ref, slot, path)
	}
	return sb.MemberUUID, started, nil
}
