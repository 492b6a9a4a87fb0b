// Package memberio is the engine's member I/O on Linux: members opened
// with O_DIRECT (Member, an engine.Member) and an engine.Executor that
// submits every member I/O of a batch to an io_uring in one io_uring_enter
// and reaps the completions in the calling goroutine (Executor).
//
// # Why
//
// Buffered member I/O copies every byte through the page cache, uses the
// memory twice, and reports a failed write only at a later fsync, when the
// engine may already have acknowledged it and cannot tell which member lost
// it. With O_DIRECT a write completes only when the device has it (in its
// volatile cache at least), and its completion carries its error, which the
// Executor stores in that IO's Err before Execute returns: the engine marks
// the member failed before the request is acknowledged.
//
// # Buffers
//
// O_DIRECT needs the buffer address, the offset and the length aligned to
// the device's logical block size. The engine's own buffers are page-aligned
// (engine.AlignedBuffer) and the ublk request buffers are page-aligned mmap
// memory, so the Executor passes them to the kernel as they are; a buffer
// that is not aligned is copied through an aligned bounce buffer (counted in
// Stats.Bounces). Offsets and lengths the engine uses are multiples of its
// 4 KiB block; an unaligned one is refused with an error, never silently
// buffered.
//
// # Flushes
//
// Each Member counts its completed writes and remembers how many the last
// successful flush covered, so a flush of a member not written since its
// last flush returns at once (Stats.FlushesSkipped). The Executor runs the
// flushes of a batch as parallel io_uring fdatasyncs.
//
// # Fallback
//
// Regular files on file systems without O_DIRECT (tmpfs) are opened
// buffered, with a logged reason; their write errors show at the next
// flush, as before. Block devices must open with O_DIRECT.
package memberio
