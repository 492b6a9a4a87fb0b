package uring

import "errors"

// ErrNotSupported is wrapped by errors that say which kernel feature is
// missing (errors.Is(err, ErrNotSupported)).
var ErrNotSupported = errors.New("not supported")

// ErrSQFull is returned when every submission queue entry is in use; call
// Submit and try again.
var ErrSQFull = errors.New("io_uring submission queue full")

// Config tunes a ring. The zero value (or nil) means 64-byte SQEs and a
// completion queue twice the submission queue.
type Config struct {
	// SQE128 sets up 128-byte entries (IORING_SETUP_SQE128, Linux 5.19),
	// needed for commands with more than 16 bytes of inline payload, such as
	// ublk control commands.
	SQE128 bool
	// CQEntries sizes the completion queue (IORING_SETUP_CQSIZE); 0 means
	// the kernel default of twice the submission queue.
	CQEntries uint32
	// DeferTaskrun runs completion task work only when the ring's thread
	// waits for completions (IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN,
	// Linux 6.1), instead of interrupting it. Only one thread may then submit
	// to the ring.
	DeferTaskrun bool
	// CoopTaskrun avoids interrupting the ring's thread to run completion
	// work (IORING_SETUP_COOP_TASKRUN, Linux 5.19).
	CoopTaskrun bool
}
