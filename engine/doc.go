// Package engine is fabraid's pure-Go parity engine: it composes member
// devices into one protected volume of k data + m parity chunks per stripe
// (m=1 RAID-5, m=2 RAID-6, up to m=4), striped over one or more groups
// (RAID-x0), and serves reads and writes through member failures, crashes
// and rebuilds.
//
// The stripe mathematics and request planning are pure functions in
// engine/layout; the on-disk superblock is engine/superblock; assembly
// decisions are the pure PlanAssembly. This package executes plans against
// Members through an Executor and keeps the volume's state.
//
// # Usage
//
// Create a volume once, then open it by member paths on every start:
//
//	v, err := engine.Create(engine.Config{Name: "vol0", K: 4, M: 2, Domains: nodes}, members, names, engine.Options{})
//	...
//	v, err := engine.Open(paths, engine.Options{Epoch: leaseEpoch})
//	defer v.Close()
//	n, err := v.WriteAt(p, off)    // completed: visible, parity consistent
//	err = v.Flush()                // durable
//	n, err = v.ReadAt(p, off)
//	go v.Rebuild(ctx, engine.RebuildOptions{Rate: 500 << 20}) // after Replace/ReAdd or a stale member
//
// Offsets and lengths must be multiples of BlockSize (4096). A Volume is
// safe for concurrent use: requests to different stripes run in parallel,
// requests to one stripe are serialised by that stripe's lock (a fixed
// table of 4096 RWMutexes indexed by a hash of the stripe number; there is
// no volume-wide lock on the I/O path). Healthy reads take no lock at all
// and read straight into the caller's buffer; full-stripe writes encode
// from the caller's buffer and only parity is allocated (from a sync.Pool).
//
// # Durability
//
// WriteAt returns when every member write of the request has completed.
// Flush (the block layer's FLUSH) flushes every member; WriteAtFUA writes
// and flushes. Unflushed writes may be lost in a crash; flushed ones never
// are, with all members present or after resync.
//
// # Failures
//
// An I/O error marks the member failed: the survivors' superblocks are
// updated (event counter bumped) and the request is served by
// reconstruction. A stripe with more than m unavailable chunks returns
// ErrTooManyFailures, and a group with more than m failed members fails the
// volume (ErrVolumeFailed): errors, never wrong data.
//
// # Write hole
//
// A write-intent bitmap (one bit per region of member data) is set durably
// before a region is written and cleared lazily after flushes. After an
// unclean stop only dirty regions are resynced, in the background while the
// volume already serves (a write to a row not yet resynced resyncs it
// first; Options.SyncResync resyncs before Assemble returns), and a
// returning member is
// resynced only for regions written while it was away. While a group is
// degraded, a stripe journal on the surviving members logs the contents
// of the chunks that cannot be read before every write to their stripes,
// and assembly replays it, so a crash while degraded loses no flushed data
// either. A member lost at the crash itself while in sync stays
// unprotected: see docs/engine.md.
package engine
