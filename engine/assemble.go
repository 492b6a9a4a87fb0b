package engine

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/fabraid/fabraid/engine/superblock"
)

// ErrAssembly is wrapped by every assembly refusal.
var ErrAssembly = errors.New("cannot assemble volume")

// Candidate is one device offered to assembly with what was read from it.
type Candidate struct {
	Name string                 // device name for messages
	Size int64                  // device size in bytes
	SB   *superblock.Superblock // nil when unreadable
	Err  error                  // why SB is nil
}

// AssemblyPlan is the pure outcome of assembly: which device fills which
// slot and in which role. Nothing has been written yet.
type AssemblyPlan struct {
	// SB is the authoritative superblock with roles updated for this
	// assembly: missing members are Failed (reason FailMissing unless
	// already failed; FailIO for a full-rebuild target), stale ones and
	// returning missing or unreachable ones Rebuilding+Resync (without Resync when the
	// bitmap does not cover what they lack); a present device of a slot
	// failed for another reason is left out and the slot stays Failed.
	// Its event counter is not yet bumped.
	SB *superblock.Superblock
	// Device[slot] is the candidate index filling slot, or -1.
	Device []int
	// Stale[slot]: the device is present but older than the volume; it is
	// never read until resynced.
	Stale []bool
	// Warnings lists devices that were ignored and why.
	Warnings []string
	// Recorded is the member table as the authoritative superblock
	// recorded it before this assembly changed any role: which members
	// were in sync when the volume stopped (the stripe journal covers
	// only the others).
	Recorded []superblock.Member
}

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrAssembly, fmt.Sprintf(format, args...))
}

// immutableEqual reports whether a and b agree on everything that never
// changes after creation.
func immutableEqual(a, b *superblock.Superblock) bool {
	return a.VolumeUUID == b.VolumeUUID && a.Geometry == b.Geometry && a.Codec == b.Codec &&
		a.DataOffset == b.DataOffset && a.BitmapOffset == b.BitmapOffset &&
		a.BitmapBytes == b.BitmapBytes && a.RegionRows == b.RegionRows && a.Name == b.Name &&
		a.Flags == b.Flags && a.CTime == b.CTime && a.Version == b.Version &&
		a.JournalOffset == b.JournalOffset && a.JournalBytes == b.JournalBytes
}

// PlanAssembly decides whether cands form a startable volume. The newest
// consistent view wins (superblock.Newer: highest owner epoch, then highest
// event counter) and members with an older view are stale. A device whose
// slot the newest view records as failed is left out (warning) and
// returns only by ReAdd or Replace, unless it failed by being missing at an
// assembly or unreachable (FailReason.Returns): such a member comes back
// by itself as a stale resync target
// (only the regions dirty in the write-intent bitmap are rebuilt; all of it
// when bitmapCovers says the bitmap does not describe what it lacks).
// It refuses, naming the device and the reason, when a device has no valid
// superblock, belongs to another volume, duplicates a slot, is too small,
// disagrees with another device at the same event counter, or when a group
// has fewer than K current members.
func PlanAssembly(cands []Candidate) (*AssemblyPlan, error) {
	if len(cands) == 0 {
		return nil, refuse("no devices")
	}
	var auth *superblock.Superblock
	authIdx := -1
	var warnings []string
	var usable []Candidate
	var index []int // usable -> cands
	for i, c := range cands {
		if c.SB == nil {
			reason := c.Err
			if reason == nil {
				reason = errors.New("no superblock")
			}
			if errors.Is(reason, superblock.ErrInvalid) || c.Err == nil {
				// Garbage where a member should be: never guess.
				return nil, refuse("device %s: %v", c.Name, reason)
			}
			// The device could not be read at all: treat it as missing.
			warnings = append(warnings, fmt.Sprintf("device %s: unreadable, treated as missing: %v", c.Name, reason))
			continue
		}
		usable = append(usable, c)
		index = append(index, i)
	}
	if len(usable) == 0 {
		return nil, refuse("no readable devices (%d offered)", len(cands))
	}
	for i, c := range usable {
		if auth == nil || superblock.Newer(c.SB, auth) {
			auth, authIdx = c.SB, i
		}
	}
	cands = usable
	for _, c := range cands {
		if c.SB.VolumeUUID != auth.VolumeUUID {
			return nil, refuse("device %s belongs to volume %x, device %s to volume %x (mixed volumes)",
				c.Name, c.SB.VolumeUUID, cands[authIdx].Name, auth.VolumeUUID)
		}
		if !immutableEqual(c.SB, auth) {
			return nil, refuse("device %s: geometry or layout differs from device %s", c.Name, cands[authIdx].Name)
		}
		if sameVersion(c.SB, auth) && (!reflect.DeepEqual(c.SB.Members, auth.Members) || c.SB.Clean != auth.Clean) {
			return nil, refuse("devices %s and %s disagree at the same epoch %d and event counter %d",
				c.Name, cands[authIdx].Name, auth.Epoch, auth.Events)
		}
	}
	g := auth.Geometry
	plan := &AssemblyPlan{SB: auth.Clone(), Device: make([]int, g.Members()), Stale: make([]bool, g.Members()), Warnings: warnings,
		Recorded: append([]superblock.Member(nil), auth.Members...)}
	for i := range plan.Device {
		plan.Device[i] = -1
	}
	for i, c := range cands {
		slot := c.SB.Slot
		if auth.Members[slot].UUID != c.SB.MemberUUID {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf(
				"device %s: member %x is no longer in slot %d (replaced); ignored", c.Name, c.SB.MemberUUID, slot))
			continue
		}
		if j := plan.Device[slot]; j >= 0 {
			return nil, refuse("devices %s and %s both claim slot %d (duplicate member)", cands[j].Name, c.Name, slot)
		}
		if c.Size < auth.MinDeviceSize() {
			return nil, refuse("device %s: %d bytes, the layout needs %d", c.Name, c.Size, auth.MinDeviceSize())
		}
		if auth.Members[slot].Role == superblock.RoleSpare {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("device %s: spare in slot %d; ignored", c.Name, slot))
			continue
		}
		if m := auth.Members[slot]; m.Role == superblock.RoleFailed && !m.Failure.Returns() {
			// Failed by request, on an I/O error, or for a reason an
			// older build did not record (it may have been either): the
			// member stays failed whatever brought it back; only an
			// explicit ReAdd or Replace returns it (mdadm kicks such a
			// member too).
			plan.Warnings = append(plan.Warnings, fmt.Sprintf(
				"device %s: member of slot %d failed (%s); not assembled: bring it back with re-add or replace it",
				c.Name, slot, m.Failure))
			continue
		}
		plan.Device[slot] = i
	}
	for slot := range plan.Device {
		m := &plan.SB.Members[slot]
		i := plan.Device[slot]
		switch {
		case m.Role == superblock.RoleSpare:
		case i < 0:
			if m.Role != superblock.RoleFailed {
				plan.Warnings = append(plan.Warnings, fmt.Sprintf("slot %d: member %x missing; marked failed", slot, m.UUID))
				reason := superblock.FailMissing
				if m.Role == superblock.RoleRebuilding && !m.Resync {
					// A full-rebuild target holds valid rows only below
					// its checkpoint, which the bitmap does not describe:
					// like a member failed on an I/O error it must not
					// return by itself, and ReAdd rebuilds it in full.
					reason = superblock.FailIO
				}
				m.Role, m.Resync, m.Checkpoint, m.Failure = superblock.RoleFailed, false, 0, reason
			}
		case m.Role == superblock.RoleFailed:
			// Missing at an earlier assembly or unreachable while the
			// volume ran, and back (the only failed slots the loop above
			// keeps).
			plan.Stale[slot] = true
			was := m.Failure
			resync := bitmapCovers(cands[i].SB)
			m.Role, m.Resync, m.Checkpoint, m.Failure = superblock.RoleRebuilding, resync, 0, superblock.FailUnrecorded
			what := "resync of the regions written while it was away"
			if !resync {
				what = "full rebuild: it was being rebuilt in full when it left"
			}
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("device %s: member of slot %d was %s and is back; %s",
				cands[i].Name, slot, was, what))
		case !(sameVersion(cands[i].SB, auth) || tornBehind(cands[i].SB, auth, slot)):
			plan.Stale[slot] = true
			if m.Role != superblock.RoleRebuilding {
				// A returning member: only regions dirty in the bitmap
				// since it left need resync.
				m.Role, m.Resync, m.Checkpoint = superblock.RoleRebuilding, true, 0
			}
		}
	}
	for grp := 0; grp < g.Groups; grp++ {
		current := 0
		for mem := 0; mem < g.Width(); mem++ {
			slot := g.Slot(grp, mem)
			if plan.Device[slot] >= 0 && !plan.Stale[slot] && plan.SB.Members[slot].Role == superblock.RoleActive {
				current++
			}
		}
		if current < g.K {
			return nil, refuse("group %d has %d current members, needs k=%d (missing or stale: %s)",
				grp, current, g.K, describeMissing(plan, cands, grp))
		}
	}
	// Report indexes into the caller's slice.
	for slot, i := range plan.Device {
		if i >= 0 {
			plan.Device[slot] = index[i]
		}
	}
	return plan, nil
}

// bitmapCovers reports whether the write-intent bitmap describes
// everything a member that went missing lacks, judged by its own last
// superblock (the role it had when it left): an active member or a resync
// target is valid outside the regions dirty in the bitmap, because bits
// are cleared only while every member is in sync, so every region written
// since the member was last in sync still has its bit. A full-rebuild
// target is valid only below its checkpoint and needs a full rebuild.
func bitmapCovers(own *superblock.Superblock) bool {
	m := own.Members[own.Slot]
	return m.Role == superblock.RoleActive || m.Role == superblock.RoleRebuilding && m.Resync
}

// tornBehind reports whether c missed only the newest metadata write,
// which a crash interrupted: same owner epoch, one event behind, and the
// newest version does not record c's slot as failed. Metadata writes are
// serialised and each starts only after the previous one reached every
// writable member, and a member whose I/O fails is marked failed by the
// very next metadata write, so such a member received every data write:
// it is current, not stale, and the newest version's role and checkpoint
// apply (a rebuild flushes its target before it records a checkpoint or
// the end of the rebuild).
func tornBehind(c, auth *superblock.Superblock, slot int) bool {
	return c.Epoch == auth.Epoch && c.Events+1 == auth.Events && auth.Members[slot].Role != superblock.RoleFailed
}

func sameVersion(a, b *superblock.Superblock) bool {
	return a.Epoch == b.Epoch && a.Events == b.Events
}

func describeMissing(plan *AssemblyPlan, cands []Candidate, grp int) string {
	g := plan.SB.Geometry
	s := ""
	for mem := 0; mem < g.Width(); mem++ {
		slot := g.Slot(grp, mem)
		i := plan.Device[slot]
		var d string
		switch {
		case i < 0:
			d = fmt.Sprintf("slot %d missing", slot)
		case plan.Stale[slot]:
			d = fmt.Sprintf("slot %d %s stale (epoch %d events %d, volume at epoch %d events %d)", slot, cands[i].Name,
				cands[i].SB.Epoch, cands[i].SB.Events, plan.SB.Epoch, plan.SB.Events)
		case plan.SB.Members[slot].Role != superblock.RoleActive:
			d = fmt.Sprintf("slot %d %s %s", slot, cands[i].Name, plan.SB.Members[slot].Role)
		default:
			continue
		}
		if s != "" {
			s += ", "
		}
		s += d
	}
	return s
}
