package engine

// testHooks are the test-only controls of a volume, passed to the internal
// create and assemble (Create and Assemble pass none), never part of
// Options. The zero value is the production engine.
type testHooks struct {
	// resyncGate, when set, holds the background resync until it is
	// closed (assembly returns before the resync ran).
	resyncGate <-chan struct{}
	// skipDemandResync makes writes skip the resync of a row the
	// background resync has not reached (a deliberate bug: the model test
	// must catch it).
	skipDemandResync bool
	// journalOff runs a version 2 volume without its stripe journal (the
	// write hole is open again), to show what the journal prevents.
	journalOff bool
	// beforeJournalDone, when set, runs after a journaled write's data
	// and parity writes, right before its record leaves the journal's
	// in-flight set (a member failure in that window).
	beforeJournalDone func(stripe int64)
}
