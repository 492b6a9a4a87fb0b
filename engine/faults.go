package engine

import (
	"errors"
	"io"

	"github.com/fabraid/fabraid/engine/superblock"
)

// faults re-introduces bugs that were fixed, one switch each, so that the
// schedule checker (schedule_test.go) can show it finds them. The zero value
// is the correct engine; nothing outside tests sets a field.
type faults struct {
	// readdEarlySnapshot: ReAdd takes the resync set before the slot is
	// writable (issue 10, bug 1).
	readdEarlySnapshot bool
	// endForgets: a write that completes does not mark its region
	// touched, so a flush that began before it completed may clear the
	// bit under the unflushed write (issue 10, bug 2).
	endForgets bool
	// ackBeforeRecorded: a write that skipped a member marked failed is
	// acknowledged before the metadata write recording the failure
	// finished (found by the schedule checker).
	ackBeforeRecorded bool
	// recordBeforeFlush: a member failure is recorded without first
	// flushing the writes that completed before it (found by the
	// schedule checker).
	recordBeforeFlush bool
	// fenceEventsOnly: the fencing check takes a member's newer superblock
	// copy by event counter alone, not by superblock.Newer (issue 10,
	// bug 4): with copy A holding a new owner's epoch and copy B the old
	// owner's higher event count, the old owner does not see it is fenced.
	fenceEventsOnly bool
}

// readCopiesEventsOnly is superblock.ReadCopies with the ordering of bug 4
// (faults.fenceEventsOnly): the copy with the higher event counter wins.
func readCopiesEventsOnly(r io.ReaderAt) (*superblock.Superblock, error) {
	var best *superblock.Superblock
	buf := make([]byte, superblock.CopySize)
	for _, off := range []int64{superblock.CopyAOffset, superblock.CopyBOffset} {
		if _, err := r.ReadAt(buf, off); err != nil {
			continue
		}
		if sb, err := superblock.Unmarshal(buf); err == nil && (best == nil || sb.Events > best.Events) {
			best = sb
		}
	}
	if best == nil {
		return nil, errors.New("no valid superblock copy")
	}
	return best, nil
}
