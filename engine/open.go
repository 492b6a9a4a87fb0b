package engine

import (
	"context"

	"fmt"

	"github.com/fabraid/fabraid/engine/superblock"
)

// Open opens the member devices or files at paths and assembles the volume
// they hold. See Assemble.
func Open(paths []string, opts Options) (*Volume, error) {
	devs := make([]Member, 0, len(paths))
	for _, p := range paths {
		m, err := OpenFileMember(p)
		if err != nil {
			for _, d := range devs {
				_ = d.Close()
			}
			return nil, fmt.Errorf("%w: device %s: %w", ErrAssembly, p, err)
		}
		devs = append(devs, m)
	}
	return Assemble(devs, paths, opts)
}

// Assemble reads the superblocks of devs, decides with PlanAssembly which
// device fills which slot, and starts the volume: missing members are
// recorded as failed, stale members become resync targets (call Rebuild),
// the owner epoch and event counter are bumped, and after an unclean stop
// the parity of every region dirty in the write-intent bitmap is
// recomputed: in the background by default (writes to a row it has not
// reached resync that row first), before Assemble returns with
// Options.SyncResync. Assemble takes ownership of devs: the
// ones it does not use are closed, the others are closed by Volume.Close.
func Assemble(devs []Member, names []string, opts Options) (*Volume, error) {
	return assemble(devs, names, opts, testHooks{})
}

func assemble(devs []Member, names []string, opts Options, h testHooks) (*Volume, error) {
	if names == nil {
		names = make([]string, len(devs))
		for i := range names {
			names[i] = fmt.Sprintf("device%d", i)
		}
	}
	cands := make([]Candidate, len(devs))
	for i, d := range devs {
		cands[i].Name = names[i]
		size, err := d.Size()
		if err != nil {
			cands[i].Err = err
			continue
		}
		cands[i].Size = size
		cands[i].SB, cands[i].Err = superblock.ReadCopies(d)
	}
	plan, err := PlanAssembly(cands)
	if err != nil {
		closeAll(devs)
		return nil, err
	}
	sb := plan.SB
	g := sb.Geometry
	if opts.Epoch != 0 && opts.Epoch < sb.Epoch {
		closeAll(devs)
		return nil, fmt.Errorf("%w: owner epoch %d older than on-disk epoch %d (stale owner)", ErrAssembly, opts.Epoch, sb.Epoch)
	}
	bySlot := make([]Member, g.Members())
	slotNames := make([]string, g.Members())
	used := make([]bool, len(devs))
	for slot, i := range plan.Device {
		slotNames[slot] = "(missing)"
		if i >= 0 {
			bySlot[slot], slotNames[slot], used[i] = devs[i], names[i], true
		}
	}
	for i, d := range devs {
		if !used[i] {
			_ = d.Close()
		}
	}
	v, err := newVolume(sb, bySlot, slotNames, opts, h)
	if err != nil {
		closeAll(bySlot)
		return nil, err
	}
	for _, w := range plan.Warnings {
		v.log.Warn(w)
	}
	if v.jrn != nil {
		// Until the replay below is durable, a member failure must not
		// retire the journal (its records are not replayed yet); the
		// reset after the replay retires everything.
		v.jrn.held.Store(true)
	}
	// The bitmap is the union of the current members' copies: a bit set
	// on any of them may mark a torn stripe.
	dirty := newBitset(sb.RegionCount())
	buf := make([]byte, sb.BitmapBytes)
	for slot, d := range bySlot {
		if d == nil || plan.Stale[slot] {
			continue
		}
		if _, err := d.ReadAt(buf, sb.BitmapOffset); err != nil {
			closeAll(bySlot)
			return nil, fmt.Errorf("%w: device %s: read bitmap: %w", ErrAssembly, slotNames[slot], err)
		}
		b := decodeBitset(buf, sb.RegionCount())
		for i := range dirty {
			dirty[i] |= b[i]
		}
	}
	v.bm = newWriteIntent(sb.RegionRows, g.Rows, dirty, v.persistBitmap)
	for slot := range bySlot {
		m := sb.Members[slot]
		if m.Role == superblock.RoleRebuilding && m.Resync {
			rs := dirty.clone()
			v.slots[slot].resync.Store(&rs)
		}
	}
	// Which rows of each member were durably in sync when the volume
	// stopped: writes to the others were journaled.
	v.crashJcp = make([]int64, len(bySlot))
	for slot, m := range plan.Recorded {
		v.crashJcp[slot] = durableRows(m, g.Rows)
		if m.OwnerJournal {
			// The owner's member: every write to its data chunks was
			// journaled (owner-domain journaling).
			v.crashJcp[slot] = 0
		}
	}
	if !sb.Clean && dirty.any() && opts.RefuseUnsafeStart {
		for slot := range bySlot {
			r := v.slotRole(slot)
			if r == superblock.RoleActive || r == superblock.RoleSpare {
				continue
			}
			if v.jrn != nil && v.crashJcp[slot] == 0 {
				continue // every write its absence made unsafe was journaled
			}
			closeAll(bySlot)
			why := "the volume has no stripe journal"
			if v.jrn != nil {
				why = fmt.Sprintf("the member was in sync (%s on disk) when the volume stopped, so writes in flight were not journaled",
					plan.Recorded[slot].Role)
			}
			return nil, fmt.Errorf("%w: unclean stop, slot %d is now %s and %s (%d dirty regions): "+
				"stripes written at the crash may be torn and cannot be repaired (write hole); start without RefuseUnsafeStart to accept",
				ErrAssembly, slot, r, why, dirty.count())
		}
	}
	// Every writable member gets the merged bitmap (stale ones had an old
	// copy).
	for blk := 0; blk < int(sb.BitmapBytes)/bitmapBlock; blk++ {
		if err := v.persistBitmap(blk, v.bm.block(blk)); err != nil {
			closeAll(bySlot)
			return nil, fmt.Errorf("%w: write bitmap: %w", ErrAssembly, err)
		}
	}
	// The owner's members are recorded as journal-covered only once no
	// stripe is torn any more: a stripe this assembly has not resynced
	// yet may have been torn by the stop, without a record.
	if err := v.start(opts, sb.Clean || !dirty.any()); err != nil {
		closeAll(bySlot)
		return nil, err
	}
	holes := map[int64]bool{}
	if v.jrn != nil {
		js, err := scanJournal(bySlot, sb)
		if err != nil {
			closeAll(bySlot)
			return nil, fmt.Errorf("%w: journal: %w", ErrAssembly, err)
		}
		// Sequence numbers jump by journalSeqGap at every assembly: a
		// member missing now may hold unretired records of the last
		// owner with numbers above any seen here; when it returns, those
		// must be below the retired number, never taken for new ones.
		v.jrn.next = max(js.maxSeq, js.retired) + journalSeqGap(sb)
		v.jrn.gen = js.gen + 1
		switch {
		case sb.Clean || !dirty.any():
		case !js.headers:
			// Without a header nothing says which records are retired;
			// replaying old ones could undo flushed writes. Count every
			// stripe that cannot be resynced as a write hole.
			v.log.Warn("stripe journal has no valid header on any member: not replayed")
			for slot := range v.crashJcp {
				v.crashJcp[slot] = g.Rows
			}
		case len(js.records) > 0:
			v.log.Info("unclean stop: replaying the stripe journal", "records", len(js.records))
			if err := v.replayJournal(js.records, dirty, holes); err != nil {
				closeAll(bySlot)
				return nil, fmt.Errorf("journal replay after unclean stop: %w", err)
			}
		}
	}
	var rs *resyncState
	syncResynced := false
	if !sb.Clean && dirty.any() {
		crashJcp := v.crashJcp
		unprotected := func(grp int, row int64, unreadable uint64) bool {
			return v.unprotectedAt(crashJcp, grp, row, unreadable, holes)
		}
		if opts.SyncResync {
			v.log.Info("unclean stop: resyncing dirty regions", "regions", dirty.count())
			if err := v.resyncParity(context.Background(), dirty, unprotected); err != nil {
				closeAll(bySlot)
				return nil, fmt.Errorf("resync after unclean stop: %w", err)
			}
			syncResynced = true
		} else {
			// From here on every write to a row the resync has not
			// reached resyncs that row first (writeStripe).
			rs = newResyncState(v, dirty, unprotected)
			v.rs.Store(rs)
		}
	}
	if v.jrn != nil {
		// Everything replayed (and, with SyncResync, resynced) is
		// durable before the records are retired. The background resync
		// needs no record: the replay made every stripe with an
		// unreadable data chunk consistent, and the resync recomputes
		// the others from their data alone.
		if err := v.flushMembers(); err == nil {
			err = v.jrn.reset()
		}
		if err != nil {
			closeAll(bySlot)
			return nil, fmt.Errorf("%w: journal: %w", ErrAssembly, err)
		}
		v.jrn.held.Store(false)
	}
	if syncResynced {
		// Flushed above: every stripe is consistent now.
		if err := v.recordOwnerJournal(); err != nil {
			closeAll(bySlot)
			return nil, fmt.Errorf("%w: %w", ErrAssembly, err)
		}
	}
	v.crashJcp = nil
	if v.failed.Load() {
		closeAll(bySlot)
		return nil, fmt.Errorf("%w: %w", ErrAssembly, ErrVolumeFailed)
	}
	if rs != nil {
		v.log.Info("unclean stop: resyncing dirty regions in the background", "regions", rs.regions)
		v.resyncWG.Add(1)
		go v.resyncBackground(rs, opts.Resync, h.resyncGate)
	}
	v.startIdleCleaner(opts.IdleClean)
	return v, nil
}

// unprotected reports whether a dirty stripe whose parity cannot be
// recomputed (unreadable data positions) may be torn: without a journal
// always; with one when replay could not repair it, or when one of its
// unreadable data chunks was in sync when the volume stopped (the member
// was lost with the crash, and writes to it were not journaled).
func (v *Volume) unprotectedAt(crashJcp []int64, grp int, row int64, unreadable uint64, holes map[int64]bool) bool {
	g := v.geo
	if v.jrn == nil || holes[g.StripeOf(grp, row)] {
		return true
	}
	for pos := 0; pos < g.K; pos++ {
		if unreadable&(1<<uint(pos)) != 0 && row < crashJcp[g.Slot(grp, g.MemberOf(row, pos))] {
			return true
		}
	}
	return false
}

func closeAll(devs []Member) {
	for _, d := range devs {
		if d != nil {
			_ = d.Close()
		}
	}
}
