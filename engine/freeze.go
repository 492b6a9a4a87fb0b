package engine

// Freeze and Thaw: the self-fence of an owner that may have lost its lease.
//
// Every member I/O the volume issues goes through one gate (gatedExecutor
// wraps the Executor; the few direct member writes use memberWrite and
// memberFlush). Freeze shuts the gate and waits until every batch that
// passed it has completed; from then on no member I/O is issued: batches
// wait at the gate, so requests stay pending (none is acknowledged, none
// fails) while they hold whatever stripe locks they took. Thaw opens the
// gate again under a newer owner epoch, after re-reading the superblocks.
// The only member I/O outside the gate are superblock reads (the fence
// checks of Thaw and of every metadata write) and the flush of a rebuild
// checkpoint (a flush writes nothing new).
//
// Reads are held too: while frozen, a newer owner may be writing, and an
// old owner's read could return data it has overwritten.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fabraid/fabraid/engine/superblock"
)

// Errors of Freeze and Thaw.
var (
	// ErrStaleEpoch: Thaw was given an owner epoch that is not newer than
	// the volume's; a frozen volume resumes only under a new lease.
	ErrStaleEpoch = errors.New("owner epoch not newer than the volume's")
	// ErrNotFrozen: Thaw or HandOff of a volume that is not frozen.
	ErrNotFrozen = errors.New("volume not frozen")
	// ErrHandedOff: the frozen volume gave its requests back (HandOff):
	// they failed so that the initiator sends them to another path. It
	// has a HandOff method that reports true (kernel/ublk completes such
	// a request with a status the initiator retries elsewhere).
	ErrHandedOff error = handOffError{}
)

// errFencedHandedOff is what a fenced volume's requests fail with once it
// handed them off.
var errFencedHandedOff = fmt.Errorf("%w: %w", ErrFenced, ErrHandedOff)

// handOffError is ErrHandedOff's type: an error that asks the ublk server
// to hand its request back (kernel/ublk.HandOffError).
type handOffError struct{}

func (handOffError) Error() string {
	return "volume frozen and handed off: requests go to another path"
}

// HandOff reports that a request failing with this error is handed off.
func (handOffError) HandOff() bool { return true }

// gateFrozen is the frozen bit of freezeGate.state; the bits below count
// the batches that passed the gate and have not completed.
const gateFrozen = int64(1) << 62

// freezeGate holds member I/O while the volume is frozen. The open path is
// two atomic adds per batch; only a frozen gate takes the mutex.
type freezeGate struct {
	state atomic.Int64 // gateFrozen | batches in flight

	mu      sync.Mutex
	cond    *sync.Cond // on mu: thawed, stopped, or the last batch in flight completed
	held    int        // batches waiting at the frozen gate
	wakeups int        // times a held batch woke up (tests)
	stopErr error      // set while frozen: held and later batches fail with it
	closed  bool       // the volume stopped: a later Freeze only stops the gate

	// drainWait, when set (tests), is called when Freeze starts waiting
	// for batches in flight.
	drainWait func()
}

func (g *freezeGate) lock() {
	g.mu.Lock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
}

// enter lets a batch pass, waiting while the gate is frozen; it returns
// the error the batch must fail with when the gate was stopped.
func (g *freezeGate) enter() error {
	for {
		if g.state.Add(1)&gateFrozen == 0 {
			return nil
		}
		g.exit() // back out: the freezer may be waiting for this one
		g.lock()
		if g.state.Load()&gateFrozen != 0 && g.stopErr == nil {
			// Broadcast once, on arrival (tests wait for the held
			// count): a held batch that broadcast on every wakeup would
			// wake the other held ones, which wake it in turn.
			g.held++
			g.cond.Broadcast()
			for g.state.Load()&gateFrozen != 0 && g.stopErr == nil {
				g.cond.Wait()
				g.wakeups++
			}
			g.held--
		}
		err := g.stopErr
		g.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// tryEnter lets a batch pass only when the gate is open; it never waits.
// On true, exit must follow.
func (g *freezeGate) tryEnter() bool {
	if g.state.Add(1)&gateFrozen == 0 {
		return true
	}
	g.exit()
	return false
}

// exit ends a batch that passed enter.
func (g *freezeGate) exit() {
	if g.state.Add(-1) == gateFrozen {
		g.lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	}
}

// freeze shuts the gate and waits until no batch is in flight. It reports
// false when the volume was closed (the gate is stopped instead).
func (g *freezeGate) freeze() bool {
	g.lock()
	defer g.mu.Unlock()
	g.state.Or(gateFrozen)
	if g.closed {
		g.stopLocked(ErrClosed)
		return false
	}
	if g.state.Load() != gateFrozen && g.drainWait != nil {
		g.drainWait()
	}
	for g.state.Load() != gateFrozen {
		g.cond.Wait()
	}
	return true
}

func (g *freezeGate) frozen() bool { return g.state.Load()&gateFrozen != 0 }

// open thaws the gate after a Thaw's checks: a hand-off ends (the
// batches that come now pass), held batches proceed.
func (g *freezeGate) open() {
	g.lock()
	if errors.Is(g.stopErr, ErrHandedOff) {
		g.stopErr = nil
	}
	g.state.And(^gateFrozen)
	g.cond.Broadcast()
	g.mu.Unlock()
}

// stopLocked makes held and later batches of a frozen gate fail with err.
func (g *freezeGate) stopLocked(err error) {
	if g.stopErr == nil {
		g.stopErr = err
	}
	g.cond.Broadcast()
}

// close marks the volume stopped: a frozen gate fails its held batches
// with ErrClosed (an open gate stays open, as before Freeze existed).
func (g *freezeGate) close() {
	g.lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.frozen() {
		g.stopLocked(ErrClosed)
	}
}

// gatedExecutor runs every batch through the volume's gate.
type gatedExecutor struct {
	inner Executor
	gate  *freezeGate
}

// Execute implements Executor.
func (e *gatedExecutor) Execute(ios []IO) {
	if err := e.gate.enter(); err != nil {
		if errors.Is(err, ErrHandedOff) && onlyFlushes(ios) {
			// A flush writes nothing new; done here, it makes the
			// writes this owner acknowledged durable before the host
			// hears of the flush. Handed off instead, it would be lost:
			// a flush the Linux host fails over completes as a success
			// without being sent again (docs/nvmeof.md).
			e.inner.Execute(ios)
			return
		}
		for i := range ios {
			ios[i].Err = err
		}
		return
	}
	e.inner.Execute(ios)
	e.gate.exit()
}

func onlyFlushes(ios []IO) bool {
	for _, io := range ios {
		if !io.Flush {
			return false
		}
	}
	return len(ios) > 0
}

// memberWrite writes buf at off to dev through the gate (for the few
// writes that are not part of an Executor batch).
func (v *Volume) memberWrite(dev Member, buf []byte, off int64) error {
	ios := []IO{{Dev: dev, Write: true, Buf: buf, Off: off}}
	v.exec.Execute(ios)
	return ios[0].Err
}

// memberFlush flushes dev through the gate.
func (v *Volume) memberFlush(dev Member) error {
	ios := []IO{{Dev: dev, Flush: true}}
	v.exec.Execute(ios)
	return ios[0].Err
}

// Freeze stops the volume from issuing member I/O: it returns once every
// member I/O already issued has completed, and from then on requests (and
// rebuild, scrub, resync, metadata writes) wait before their next member
// I/O; nothing is acknowledged while the volume is frozen. Call it when
// the owner's lease may be lost (the self-fence deadline); only Thaw with
// a newer epoch, Abandon or Close end it. Freezing a frozen volume does
// nothing.
//
// Member I/O that was already in flight is waited for, however long the
// device takes; the storage fence, not Freeze, ends an old owner's access
// to remote drives.
func (v *Volume) Freeze() {
	if v.gate.freeze() {
		v.log.Warn("frozen: no member I/O until thawed under a newer owner epoch", "epoch", v.epoch.Load())
	}
}

// Frozen reports whether the volume is frozen.
func (v *Volume) Frozen() bool { return v.gate.frozen() }

// Thaw resumes a frozen volume under owner epoch, which must be newer than
// the volume's (ErrStaleEpoch otherwise: the lease that froze it is gone,
// only a new one may resume it). It first re-reads the superblock of every
// member the volume holds: if one carries a newer epoch than the volume's,
// another owner has run the volume meanwhile, and the volume is fenced for
// good (ErrFenced; the held requests fail with it); if a writable member's
// superblock cannot be read, Thaw refuses and the volume stays frozen
// (nothing proves that no newer owner wrote it). Then the gate opens and
// the new epoch is written to every member's superblock. The caller must
// hold the lease of epoch while it calls Thaw.
func (v *Volume) Thaw(epoch uint64) error {
	if v.closed.Load() {
		return ErrClosed
	}
	if !v.gate.frozen() {
		return ErrNotFrozen
	}
	if err := v.stopErr(); err != nil {
		return err
	}
	ours := v.epoch.Load()
	if epoch <= ours {
		return fmt.Errorf("thaw at epoch %d (volume at %d): %w", epoch, ours, ErrStaleEpoch)
	}
	// metaMu cannot be taken here: a metadata write may be held at the
	// gate with it. The member table read is racy but harmless: the
	// devices and roles do not change while the gate is shut.
	for slot := range v.slots {
		d := v.dev(slot)
		if d == nil {
			continue
		}
		sb, err := superblock.ReadCopies(d)
		if err != nil {
			if v.writable(slot) {
				return fmt.Errorf("thaw: slot %d: %w; staying frozen", slot, err)
			}
			continue
		}
		if sb.VolumeUUID == v.base.VolumeUUID && sb.Epoch > ours {
			v.fenced.Store(true)
			v.log.Error("fenced: a newer owner has run the volume while it was frozen", "our_epoch", ours,
				"disk_epoch", sb.Epoch, "slot", slot)
			v.gate.lock()
			v.gate.stopLocked(ErrFenced)
			v.gate.mu.Unlock()
			return fmt.Errorf("thaw: %w", ErrFenced)
		}
	}
	v.gate.open()
	v.handedOff.Store(false)
	v.metaMu.Lock()
	defer v.unlockMeta()
	v.meta.Epoch = epoch
	v.epoch.Store(epoch)
	if err := v.writeMetaLocked(); err != nil {
		return fmt.Errorf("thaw: write epoch %d: %w", epoch, err)
	}
	v.log.Info("thawed", "epoch", epoch)
	return nil
}

// HandOff gives a frozen volume's held requests back instead of holding
// them until the host's I/O timeout: every request held at the gate, and
// every later one, fails with ErrHandedOff, no member write or read is
// issued and no member is marked failed for it. Flushes are the exception:
// a batch of member flushes runs (it writes nothing new), so a held flush
// request completes for real when the members can still be flushed. The
// failed requests carry ErrHandedOff, which makes the ublk server complete
// them with -ENODATA (kernel/ublk.HandOffError): nvmet
// answers those with a status the Linux host retries (Access Denied
// without DNR), and the retry, refused by an ANA-inaccessible port, fails
// over to another path at once (docs/nvmeof.md, "Which completion fails
// over"). So call it only after every port exporting the volume shows it
// inaccessible (or change): on a port that is still optimized the host
// retries on the same path, five times, and then fails the request.
//
// The hand-off lasts until a Thaw: that Thaw checks the superblocks as
// for any frozen volume (a newer owner's epoch fences the volume, whose
// requests go on being handed off), and a successful one serves requests
// again. No request was acknowledged or written by the hand-off, so a
// thaw resumes exactly the state a freeze left.
func (v *Volume) HandOff() error {
	g := &v.gate
	g.lock()
	defer g.mu.Unlock()
	if !g.frozen() {
		return ErrNotFrozen
	}
	if v.handedOff.Swap(true) {
		return nil
	}
	g.stopLocked(ErrHandedOff)
	v.log.Warn("frozen volume handed off: held and new requests fail over to another path")
	return nil
}

// HandedOff reports whether HandOff gave the volume's requests back and no
// Thaw has resumed it since.
func (v *Volume) HandedOff() bool { return v.handedOff.Load() }

// closeFrozen is Close of a frozen volume: nothing is written (the owner
// may have lost the volume), held requests fail with ErrClosed, the
// members are closed.
func (v *Volume) closeFrozen() error {
	v.gate.close()
	v.stopBackground()
	for slot := range v.slots {
		if d := v.dev(slot); d != nil {
			_ = d.Close()
		}
	}
	return fmt.Errorf("close volume %s: frozen, nothing written: %w", v.base.Name, ErrClosed)
}

// refuseNewerLocked fails with ErrFenced (and fences the volume) when dev
// holds this volume's superblock in a newer version than the volume's own
// (superblock.Newer): a newer owner has written it, and this volume must
// not write to it. Callers hold metaMu.
func (v *Volume) refuseNewerLocked(dev Member, name string) error {
	sb, err := superblock.ReadCopies(dev)
	if err != nil || sb.VolumeUUID != v.base.VolumeUUID || !superblock.Newer(sb, v.meta) {
		return nil
	}
	v.fenced.Store(true)
	v.log.Error("fenced: a device holds a newer owner's metadata", "our_epoch", v.meta.Epoch,
		"disk_epoch", sb.Epoch, "device", name)
	return fmt.Errorf("%s holds epoch %d events %d, newer than this volume's %d/%d: %w",
		name, sb.Epoch, sb.Events, v.meta.Epoch, v.meta.Events, ErrFenced)
}
