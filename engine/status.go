package engine

import (
	"slices"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// MemberStatus describes one member slot.
type MemberStatus struct {
	Slot       int
	Device     string
	Domain     string
	Role       superblock.Role
	Resync     bool
	Checkpoint int64 // rows rebuilt so far (Rebuilding)
	// Failure is why a failed member failed; unless it Returns (missing
	// or unreachable: back by itself when its device is found again) it
	// stays failed until ReAdd or Replace.
	Failure superblock.FailReason
}

// Status is a snapshot of the volume's state.
type Status struct {
	Name          string
	UUID          [16]byte
	Size          int64
	Geometry      layout.Geometry
	Events, Epoch uint64
	Failed        bool
	Degraded      bool
	DirtyRegions  int64
	// WriteHoleStripes counts stripes that were dirty at an unclean stop
	// while degraded: their parity could not be recomputed, so the chunks
	// reconstructed there may be wrong (docs/engine.md, "write hole").
	WriteHoleStripes int64
	// Journal reports whether the stripe journal protects degraded writes
	// (format version 2 with a journal area).
	Journal bool
	// JournalBytes is the journal area on every member (header blocks
	// included); 0 without a journal.
	JournalBytes int64
	// JournalRecords counts the records written since assembly (one per
	// write to a stripe with a data chunk that is not durably readable);
	// JournalReplayed the records replayed by assembly.
	JournalRecords, JournalReplayed int64
	// JournalForcedRetires counts the retires a full journal forced since
	// assembly: each flushes every member and writes the journal header
	// while the writer that needed room waits.
	JournalForcedRetires int64
	// OwnerJournal counts the members covered by owner-domain journaling
	// in this assembly (Options.OwnerDomain): every write to a stripe with
	// a data chunk on one of them is journaled. Zero when it is off.
	OwnerJournal int
	// ResyncRegions counts the regions dirty at an unclean stop whose
	// parity the background resync has not finished (0 when none); the
	// resync itself shows as Progress kind "resync" while it runs.
	ResyncRegions int64
	Members       []MemberStatus
	Progress      *Progress // current rebuild, resync or scrub, if any
	// LastRebuild is the last rebuild (or resync of returning members)
	// since assembly, as it ended: with Progress.Partial, Regions,
	// CoverBytes, Bytes and MemberBytes it says how much of the members
	// it had to rewrite and did.
	LastRebuild *Progress
	// Stale: the volume is frozen with a metadata update held at its
	// gate, so this is the last snapshot taken before (or, with none
	// taken, only the volume's identity and epoch).
	Stale bool `json:",omitempty"`
}

// Status returns a snapshot of the volume's state. It never waits for a
// frozen volume: a metadata update held at the gate keeps the metadata
// lock until a thaw or close, and then Status returns the last snapshot,
// marked Stale.
func (v *Volume) Status() Status {
	for !v.metaMu.TryLock() {
		if v.gate.frozen() {
			return v.staleStatus()
		}
		time.Sleep(time.Millisecond)
	}
	defer v.metaMu.Unlock()
	st := v.statusLocked()
	v.lastStatus.Store(&st)
	return st
}

// staleStatus is the last snapshot, marked Stale.
func (v *Volume) staleStatus() Status {
	p := v.lastStatus.Load()
	if p == nil {
		return Status{Name: v.base.Name, UUID: v.base.VolumeUUID, Size: v.Size(), Geometry: v.geo, Epoch: v.epoch.Load(), Stale: true}
	}
	st := *p
	st.Members = slices.Clone(st.Members)
	st.Stale = true
	return st
}

// statusLocked builds a snapshot; callers hold metaMu.
func (v *Volume) statusLocked() Status {
	st := Status{
		Name: v.base.Name, UUID: v.base.VolumeUUID, Size: v.Size(), Geometry: v.geo,
		Events: v.meta.Events, Epoch: v.meta.Epoch, Failed: v.failed.Load(),
		Degraded: !v.allInSync(), DirtyRegions: v.bm.snapshot().count(), Progress: v.progress.Load(),
		WriteHoleStripes: v.writeHole.Load(), LastRebuild: v.lastRebuild.Load(),
	}
	if rs := v.rs.Load(); rs != nil {
		st.ResyncRegions = rs.remaining()
	}
	if v.jrn != nil {
		st.Journal, st.JournalBytes = true, v.base.JournalBytes
		st.JournalRecords, st.JournalReplayed = v.jrn.records.Load(), v.jrn.replayed.Load()
		st.JournalForcedRetires = v.jrn.forced.Load()
		st.OwnerJournal = v.ownerSlots
	}
	for slot := range v.slots {
		st.Members = append(st.Members, MemberStatus{
			Slot: slot, Device: v.names[slot], Domain: v.meta.Members[slot].Domain, Role: v.slotRole(slot),
			Resync: v.slots[slot].resync.Load() != nil, Checkpoint: v.slots[slot].checkpoint.Load(),
			Failure: v.meta.Members[slot].Failure,
		})
	}
	return st
}
