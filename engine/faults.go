package engine

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
}
