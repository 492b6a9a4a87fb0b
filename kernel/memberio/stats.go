package memberio

import "sync/atomic"

// Stats counts what a Member or an Executor did.
type Stats struct {
	// Batches and Enters count Execute calls and their io_uring_enter
	// calls (more than one per batch only when the batch exceeds the ring
	// or completions trickle in); IOs counts the member I/Os submitted.
	Batches, Enters, IOs atomic.Int64
	// Bounces counts I/Os whose buffer was not aligned and went through a
	// bounce copy.
	Bounces atomic.Int64
	// Flushes and FlushesSkipped count member flushes issued, and skipped
	// because the member had no write since its last flush.
	Flushes, FlushesSkipped atomic.Int64
	// DirectReads counts reads a Backend planned for a ublk queue thread
	// to submit itself.
	DirectReads atomic.Int64
	// DirectWrites counts writes a Backend planned for a ublk queue
	// thread to carry out itself.
	DirectWrites atomic.Int64
}
