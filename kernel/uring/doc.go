// Package uring is a minimal io_uring for fabraid: ring setup (optionally with
// 128-byte SQEs, which ublk control commands need), the shared-memory
// submission and completion queues, submit-and-wait, and preparation helpers
// for the operations fabraid uses: IORING_OP_URING_CMD (ublk), read, write,
// fsync and nop.
//
// It is not a general io_uring library: no SQPOLL, no registered buffers or
// files, no multishot. It is built on golang.org/x/sys/unix through
// kernel/internal/ublksys and needs no cgo.
//
// # Concurrency
//
// A Ring is not safe for concurrent use. The kernel runs completion work for
// some commands (ublk's among them) in the context of the thread that
// submitted them, so a Ring used for ublk I/O must be driven from one
// goroutine locked to its OS thread (runtime.LockOSThread) for its whole life.
//
// # Errors
//
// Setup failures caused by a kernel without io_uring, or one where it is
// disabled (sysctl kernel.io_uring_disabled), wrap ErrNotSupported with what
// is required. Completion results are returned as the kernel wrote them: a
// negative CQE.Res is -errno.
package uring
