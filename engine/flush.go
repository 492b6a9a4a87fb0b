package engine

// Flush, Close and Abandon: durability points and the lazy bitmap clean.

import (
	"fmt"
	"slices"
	"time"
)

// Flush makes every write that completed before the call durable on the
// members (the block layer's FLUSH; a FUA write is WriteAtFUA). It then
// lazily cleans write-intent regions that stayed idle for a whole flush
// interval.
func (v *Volume) Flush() error {
	t0 := time.Now()
	err := v.flush()
	v.stats.flush.done(t0, 0, err)
	return err
}

func (v *Volume) flush() error {
	if err := v.check(); err != nil {
		return err
	}
	var idle []int64
	if v.allInSync() && v.bm.cleanMu.TryLock() {
		// One clean session at a time; a concurrent Flush only flushes.
		defer v.bm.cleanMu.Unlock()
		idle = v.bm.idleCandidates()
		if rs := v.rs.Load(); rs != nil {
			// Regions the background resync has not finished keep
			// their bits: their parity is not trusted yet.
			idle = slices.DeleteFunc(idle, rs.pendingRegion)
		}
	}
	var err error
	if v.jrn != nil {
		err = v.jrn.retire()
	} else {
		err = v.flushMembers()
	}
	if err != nil {
		return err
	}
	// A member marked failed meanwhile was left out of the flush: until
	// its failure is on the survivors' superblocks an assembly after a
	// crash would trust its unflushed chunks.
	if err := v.waitFailuresRecorded(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if len(idle) > 0 && v.allInSync() {
		if err := v.bm.clear(idle); err != nil {
			return fmt.Errorf("flush: clean bitmap: %w", err)
		}
	}
	return nil
}

// flushMembers flushes every writable member as one Executor batch (in
// parallel with a parallel or io_uring Executor); failures mark members
// failed. It fails when a failure could not be recorded or the volume
// failed or is fenced.
func (v *Volume) flushMembers() error {
	if err := v.flushWritable(nil); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// Close flushes, cleans the write-intent bitmap, marks the volume clean on
// every member and closes the members. Requests must have completed.
func (v *Volume) Close() error {
	if v.closed.Swap(true) {
		return ErrClosed
	}
	if v.gate.frozen() {
		return v.closeFrozen()
	}
	// Stop a running rebuild, scrub or resync (a rebuild checkpoints)
	// and wait for it.
	v.stopBackground()
	v.rebuildMu.Lock()
	v.rebuildMu.Unlock() //nolint:staticcheck // waiting for the holder is the point
	// A resync that did not finish leaves the volume dirty with its bits
	// set, so that the next assembly resyncs again.
	resyncPending := v.rs.Load() != nil
	var err error
	if !v.failed.Load() {
		if v.jrn != nil {
			err = v.jrn.retire()
		} else {
			err = v.flushMembers()
		}
		if err == nil && v.allInSync() && !resyncPending {
			v.bm.cleanMu.Lock()
			v.bm.idleCandidates() // forget the write history: nothing is in flight
			err = v.bm.clear(v.bm.allSet())
			v.bm.cleanMu.Unlock()
		}
		if err == nil && !resyncPending {
			v.metaMu.Lock()
			// Every write completed and was flushed: parity is consistent
			// everywhere. Bits left set (while degraded) only serve the
			// resync of members that return.
			v.meta.Clean = true
			err = v.writeMetaLocked()
			v.unlockMeta()
		}
	}
	for slot := range v.slots {
		if d := v.dev(slot); d != nil {
			if cerr := d.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("close volume %s: %w", v.base.Name, err)
	}
	return nil
}

// Abandon stops the volume without flushing or marking it clean, as a
// crash would; members are not closed. For tests and fencing.
// A background resync is stopped first (its row in progress completes),
// so that nothing writes to the members after Abandon returns.
func (v *Volume) Abandon() {
	v.closed.Store(true)
	v.gate.close() // a frozen volume's held I/O fails instead of waiting
	v.stopBackground()
}

// stopBackground tells background work to stop and waits for the
// background resync goroutine.
func (v *Volume) stopBackground() {
	v.stopOnce.Do(func() { close(v.done) })
	v.resyncWG.Wait()
	v.cleanerWG.Wait()
}

// startIdleCleaner starts the idle cleaner of Options.IdleClean.
func (v *Volume) startIdleCleaner(every time.Duration) {
	if every <= 0 {
		return
	}
	v.cleanerWG.Add(1)
	go func() {
		defer v.cleanerWG.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		last := v.stats.write.requests.Load()
		for {
			select {
			case <-v.done:
				return
			case <-t.C:
			}
			writes := v.stats.write.requests.Load()
			if writes == last && v.idleCleanDue() {
				// Not counted as a consumer flush; a failure is the
				// volume's own business (members failed, logged there).
				if err := v.flush(); err != nil {
					v.log.Debug("idle bitmap clean", "err", err)
				}
			}
			last = writes
		}
	}()
}

// idleCleanDue reports whether the idle cleaner should run a clean
// session now: bits are set, the volume runs, is in sync and not frozen.
func (v *Volume) idleCleanDue() bool {
	return v.check() == nil && !v.gate.frozen() && v.allInSync() && v.rs.Load() == nil && v.bm.anySet()
}
