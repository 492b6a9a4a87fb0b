// Package ublk serves Linux ublk block devices (/dev/ublkbN) from Go: the
// control commands on /dev/ublk-control, one io_uring and one OS thread per
// hardware queue, and user recovery, so a new process can take over a device
// whose server died without the consumer seeing an error.
//
// The kernel interface is include/uapi/linux/ublk_cmd.h and
// Documentation/block/ublk.rst; the io_uring underneath is kernel/uring.
//
// # Usage
//
//	ctl, err := ublk.OpenControl()         // /dev/ublk-control; ErrNotSupported without ublk_drv
//	...
//	dev, err := ublk.Create(ctl, backend, &ublk.Config{ID: ublk.AnyID, Queues: 2})
//	...                                     // /dev/ublkbN exists now: dev.BlockPath()
//	err = dev.Close()                       // STOP_DEV, wait for the queues, DEL_DEV
//
// A Backend (the engine's volume, or Mem, Null, File here) stores the
// blocks; its methods are called concurrently from the queue threads. Flush
// and FUA requests reach Backend.Flush (or FUAWriter), discard and
// write-zeroes reach Discarder and ZeroWriter when the backend has them.
//
// # Data path
//
// By default the kernel copies request data into a per-tag buffer of
// Config.MaxIOBytes in this process (mapped once per queue). With
// Config.UserCopy (UBLK_F_USER_COPY) the server moves data itself with
// pread/pwrite on /dev/ublkcN instead. Each queue's goroutine stays locked
// to its OS thread for its whole life: the kernel binds a queue to the thread
// that fetched its tags and completes commands in that thread's context.
// By default requests are served in that thread, one at a time per queue
// (the fastest for in-memory backends); with Config.Async each request runs
// in its own goroutine and the queue thread only fetches and commits, which
// is what a backend waiting on devices (the engine volume) needs; a lone
// request while no worker is busy is still served in the queue thread, which
// keeps queue-depth-1 latency at the inline level.
//
// A queue thread spends its life in io_uring_enter. When no P is idle, the
// Go runtime hands the P of a thread in a system call to another thread, and
// the queue thread must win one back after every wake-up: programs serving
// ublk devices should run with GOMAXPROCS above the number of queues
// (`fabraid ublk serve` sees to it).
//
// # Lifecycle and crashes
//
// Devices are created with UBLK_F_USER_RECOVERY and
// UBLK_F_USER_RECOVERY_REISSUE unless Config.NoRecovery is set; Create fails
// with an error wrapping ErrNotSupported on a kernel without them rather
// than silently running without recovery.
//
//   - Close (and `fabraid ublk serve` on SIGINT/SIGTERM) stops the device
//     after completing pending requests and deletes /dev/ublkbN and
//     /dev/ublkcN. Nothing is left behind.
//   - If the server process dies (SIGKILL, crash) a device with recovery
//     stays: /dev/ublkbN remains, the kernel quiesces it and holds new and
//     in-flight I/O (requests the dead server had not completed are requeued).
//     Recover in a new process re-attaches (START_USER_RECOVERY, fetch every
//     tag, END_USER_RECOVERY) and the held requests are reissued to it: the
//     consumer sees a pause, not an error. A reissued write may be applied
//     twice, which a block backend tolerates since it was never acknowledged.
//     Until a server recovers it, I/O waits (there is no timeout in 6.12);
//     Control.Delete gives up on it, failing the held I/O.
//   - If a server without recovery dies, the kernel removes /dev/ublkbN and
//     fails its I/O; /dev/ublkcN stays until Control.Delete
//     (`fabraid ublk delete N`).
//
// # Errors
//
// Errors wrap the errno the kernel returned and name the command and the
// device. A missing ublk_drv module or a missing feature wraps
// ErrNotSupported and says what is required (module, kernel version).
package ublk
