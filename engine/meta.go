package engine

// Metadata: superblock writes (with the fencing check before each),
// member failure and how it is recorded, the bitmap blocks.

import (
	"errors"
	"fmt"

	"github.com/fabraid/fabraid/engine/superblock"
)

// writeMetaLocked bumps the event counter and writes both superblock
// copies to every writable member: copy A everywhere, flush, copy B
// everywhere, flush. A member that fails is marked failed and the write is
// repeated without it. Every attempt starts with the fencing check.
// Callers hold metaMu.
func (v *Volume) writeMetaLocked() error {
	for attempt := 0; attempt <= len(v.slots); attempt++ {
		// Before every attempt: a member that failed the last one may
		// have been cut off by the storage fence of a takeover, whose
		// new owner may have written its superblocks since.
		if err := v.checkFencedLocked(); err != nil {
			return err
		}
		if v.recordedGen.Load() < v.failGen.Load() && !v.faults.recordBeforeFlush {
			// A failure is about to be recorded: from then on an
			// assembly takes the member's rows as journaled, and the
			// writes that completed before it were not journaled.
			// Make them durable first.
			ios, slots := v.writableIOs(nil, func(d Member) IO { return IO{Dev: d, Flush: true} })
			v.exec.Execute(ios)
			for i := range ios {
				if ios[i].Err != nil {
					v.stats.memberErrors.Add(1)
					v.markIOFailedLocked(slots[i], fmt.Errorf("flush before metadata write: %w", ios[i].Err))
				}
			}
		}
		v.meta.Events++
		var failedSlot = -1
		var failErr error
		for _, off := range []int64{superblock.CopyAOffset, superblock.CopyBOffset} {
			var ios []IO
			var slots []int
			for slot := range v.slots {
				d := v.dev(slot)
				if d == nil || !v.writable(slot) {
					continue
				}
				sb := v.meta.Clone()
				sb.Slot, sb.MemberUUID = slot, sb.Members[slot].UUID
				b, err := sb.Marshal()
				if err != nil {
					return fmt.Errorf("encode superblock: %w", err)
				}
				ios = append(ios, IO{Dev: d, Write: true, Buf: b, Off: off})
				slots = append(slots, slot)
			}
			v.writeDurable(ios)
			for i := range ios {
				if ios[i].Err != nil && failedSlot < 0 {
					failedSlot, failErr = slots[i], ios[i].Err
				}
			}
			if failedSlot >= 0 {
				break
			}
		}
		if errors.Is(failErr, ErrHandedOff) {
			return fmt.Errorf("superblock write: %w", failErr)
		}
		if failedSlot < 0 {
			v.recordedGen.Store(v.failGen.Load())
			// The roles and checkpoints written are what an assembly
			// after a crash reads: from now on, rows below them need no
			// journal.
			for slot := range v.slots {
				v.slots[slot].jcp.Store(durableRows(v.meta.Members[slot], v.geo.Rows))
			}
			return nil
		}
		v.stats.memberErrors.Add(1)
		v.markIOFailedLocked(failedSlot, fmt.Errorf("superblock write: %w", failErr))
	}
	return fmt.Errorf("superblock write: %w", ErrVolumeFailed)
}

// checkFencedLocked reads the superblocks on the members before they are
// rewritten: if a newer owner epoch is there, another owner has taken the
// volume over, and this one must not write anything again (the storage
// fence should already have cut it off; this is the backstop).
func (v *Volume) checkFencedLocked() error {
	if v.fenced.Load() {
		return ErrFenced
	}
	for slot := range v.slots {
		d := v.dev(slot)
		if d == nil || !v.writable(slot) {
			continue
		}
		read := superblock.ReadCopies
		if v.faults.fenceEventsOnly {
			read = readCopiesEventsOnly
		}
		sb, err := read(d)
		if err != nil {
			continue // an unreadable member fails on the write that follows
		}
		if sb.VolumeUUID == v.base.VolumeUUID && sb.Epoch > v.meta.Epoch {
			v.fenced.Store(true)
			v.log.Error("fenced: a newer owner has the volume", "our_epoch", v.meta.Epoch,
				"disk_epoch", sb.Epoch, "device", v.names[slot])
			return ErrFenced
		}
	}
	return nil
}

// FailureClassifier is an optional interface of a Member that can tell a
// device it can no longer reach from one that failed: Unreachable reports
// whether err, returned by an I/O on the member, means that its path or
// the device itself is gone (an NVMe controller that is not live, a block
// device that vanished) while the data on it is intact. The engine asks
// when it records the failure, right after the error. A member without it
// (FileMember, MemMember) fails on an I/O error (FailIO).
type FailureClassifier interface {
	Unreachable(err error) bool
}

// ioFailReasonLocked is the reason an I/O error cause on slot's device is
// recorded with: FailUnreachable when the member says its device could not
// be reached and the write-intent bitmap describes what it will lack (it
// is active or a resync target, bitmapCovers), so that it returns by
// itself with a resync of the bitmap's regions; otherwise FailIO: a media
// error may have hit rows no bit covers, and a full-rebuild target holds
// valid rows only below its checkpoint. Callers hold metaMu.
func (v *Volume) ioFailReasonLocked(slot int, cause error) superblock.FailReason {
	c, ok := v.dev(slot).(FailureClassifier)
	if !ok || !c.Unreachable(cause) {
		return superblock.FailIO
	}
	if m := v.meta.Members[slot]; m.Role == superblock.RoleRebuilding && !m.Resync {
		return superblock.FailIO
	}
	return superblock.FailUnreachable
}

// markIOFailedLocked records slot as failed after an I/O error (cause) on
// its device, with the reason ioFailReasonLocked gives.
func (v *Volume) markIOFailedLocked(slot int, cause error) {
	if errors.Is(cause, ErrHandedOff) {
		return // the gate refused the I/O (HandOff); the member is fine
	}
	if v.slotRole(slot) != superblock.RoleFailed {
		v.markFailedLocked(slot, v.ioFailReasonLocked(slot, cause), cause)
	}
}

// markFailedLocked records slot as failed for reason in memory; callers
// hold metaMu and write the metadata afterwards.
func (v *Volume) markFailedLocked(slot int, reason superblock.FailReason, cause error) {
	if v.slotRole(slot) == superblock.RoleFailed {
		return
	}
	v.log.Error("member failed", "slot", slot, "device", v.names[slot], "reason", reason, "err", cause)
	v.failGen.Add(1)
	v.retireFailed.Store(true)
	v.slots[slot].jcp.Store(0)
	v.slots[slot].role.Store(uint32(superblock.RoleFailed))
	v.slots[slot].resync.Store(nil)
	v.slots[slot].checkpoint.Store(0)
	m := &v.meta.Members[slot]
	m.Role, m.Resync, m.Checkpoint, m.Failure = superblock.RoleFailed, false, 0, reason
	g := v.geo
	grp := slot / g.Width()
	lost := 0
	for mem := 0; mem < g.Width(); mem++ {
		if v.slotRole(g.Slot(grp, mem)) != superblock.RoleActive {
			lost++
		}
	}
	if lost > g.M {
		// Rebuilding members may still hold enough rows, but from here
		// on we refuse rather than risk serving a stripe wrongly.
		if !v.failed.Swap(true) {
			v.log.Error("volume failed", "group", grp, "lost", lost, "m", g.M)
		}
	}
}

// failMemberDev marks slot failed after an I/O error on dev (nil: any
// member), updates the survivors' superblocks and bumps the event
// counter. It does nothing
// when slot no longer holds dev (the member was replaced meanwhile). It
// returns nil when the failure is recorded on the survivors' superblocks
// (by this call or by the one that marked the slot failed first), and an
// error when it could not be (the metadata write failed, the volume is
// fenced or failed): a request that saw the member fail must not be
// acknowledged then, since an assembly after a crash would trust the
// member's stale chunks.
func (v *Volume) failMemberDev(slot int, dev Member, cause error) error {
	if errors.Is(cause, ErrHandedOff) {
		return cause // the gate refused the I/O (HandOff); the member is fine
	}
	v.metaMu.Lock()
	defer v.unlockMeta()
	if dev != nil {
		v.stats.memberErrors.Add(1)
	}
	if v.slotRole(slot) == superblock.RoleFailed || (dev != nil && v.dev(slot) != dev) {
		// A failed metadata write leaves the volume fenced or failed.
		return v.stopErr()
	}
	v.markIOFailedLocked(slot, cause)
	if err := v.writeMetaLocked(); err != nil {
		v.log.Error("cannot record member failure", "slot", slot, "err", err)
		return fmt.Errorf("record failure of slot %d: %w", slot, err)
	}
	return nil
}

// unlockMeta releases metaMu. If a member was marked failed meanwhile (by
// failMemberDev, or by any metadata write or rebuild flush that found it
// failed), the journal is retired: writes that completed before the
// failure are durable now (the metadata write recording it flushed every
// member), and their records, which lack the failed member's chunk, must
// not survive to an assembly, which would take their stripes for write
// holes. Callers that may have marked a member failed release metaMu with
// it; retiring needs metaMu free (lock order).
func (v *Volume) unlockMeta() {
	v.metaMu.Unlock()
	if v.retireFailed.Swap(false) && v.jrn != nil {
		v.jrn.retireSoon()
	}
}

// persistBitmap writes bitmap block blk to every writable member with FUA
// writes. A failing member is marked failed; the block is durable on the
// survivors. (A set bit needs only itself durable before the region's
// writes; a clear follows a flush of every member.)
func (v *Volume) persistBitmap(blk int, data []byte) error {
	return v.writeWritableFUA("bitmap write", nil, data, v.base.BitmapOffset+int64(blk)*bitmapBlock)
}
