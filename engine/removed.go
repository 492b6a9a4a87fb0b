package engine

import (
	"errors"
	"fmt"

	"github.com/fabraid/fabraid/engine/superblock"
)

// MemberRemoved records that slot's device went away (a udev remove event,
// as mdadm --incremental --fail does) instead of waiting for an I/O error
// on it, and closes the device. It is recorded as FailMissing, like a
// member absent at an assembly: the member comes back by itself (a resync
// of the regions written meanwhile) when its drive is found again. A
// full-rebuild target is recorded as FailIO, as assembly does (the bitmap
// does not describe its rows). There is no group check: the device is gone
// either way; losing a group fails the volume (ErrVolumeFailed). A slot
// already failed keeps its recorded reason.
func (v *Volume) MemberRemoved(slot int) error {
	if slot < 0 || slot >= len(v.slots) {
		return fmt.Errorf("member removed: slot %d out of range", slot)
	}
	v.metaMu.Lock()
	if v.slotRole(slot) != superblock.RoleFailed {
		m := v.meta.Members[slot]
		reason := superblock.FailMissing
		if m.Role == superblock.RoleRebuilding && !m.Resync {
			reason = superblock.FailIO
		}
		v.markFailedLocked(slot, reason, errors.New("device removed"))
		if err := v.writeMetaLocked(); err != nil {
			v.unlockMeta()
			v.log.Error("cannot record member removal", "slot", slot, "err", err)
			return fmt.Errorf("member removed: slot %d: record failure: %w", slot, err)
		}
	}
	if old := v.dev(slot); old != nil {
		v.slots[slot].dev.Store(nil)
		_ = old.Close()
	}
	v.unlockMeta()
	if v.failed.Load() {
		return ErrVolumeFailed
	}
	return nil
}
