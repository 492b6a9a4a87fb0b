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
// recomputed before Assemble returns. Assemble takes ownership of devs: the
// ones it does not use are closed, the others are closed by Volume.Close.
func Assemble(devs []Member, names []string, opts Options) (*Volume, error) {
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
	v, err := newVolume(sb, bySlot, slotNames, opts)
	if err != nil {
		closeAll(bySlot)
		return nil, err
	}
	for _, w := range plan.Warnings {
		v.log.Warn(w)
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
	if !sb.Clean && dirty.any() && opts.RefuseUnsafeStart {
		for slot := range bySlot {
			if r := v.slotRole(slot); r != superblock.RoleActive && r != superblock.RoleSpare {
				closeAll(bySlot)
				return nil, fmt.Errorf("%w: unclean stop while degraded (slot %d %s, %d dirty regions): "+
					"stripes written at the crash may be torn and cannot be repaired (write hole); start without RefuseUnsafeStart to accept",
					ErrAssembly, slot, r, dirty.count())
			}
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
	if err := v.start(opts); err != nil {
		closeAll(bySlot)
		return nil, err
	}
	if !sb.Clean && dirty.any() {
		v.log.Info("unclean stop: resyncing dirty regions", "regions", dirty.count())
		if err := v.resyncParity(context.Background(), dirty); err != nil {
			closeAll(bySlot)
			return nil, fmt.Errorf("resync after unclean stop: %w", err)
		}
	}
	if v.failed.Load() {
		closeAll(bySlot)
		return nil, fmt.Errorf("%w: %w", ErrAssembly, ErrVolumeFailed)
	}
	return v, nil
}

func closeAll(devs []Member) {
	for _, d := range devs {
		if d != nil {
			_ = d.Close()
		}
	}
}
