package engine

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// freezeRig is a 2+1 volume on hooked members with one writer goroutine
// per block, each block in its own row (its own stripe lock), each region
// already dirty (no bitmap write serialises them). The hook records every
// member write, flush and data read issued after Freeze returned, and can
// hold the first data write issued once armed.
type freezeRig struct {
	t       *testing.T
	v       *Volume
	hm      []*hookMember
	offs    []int64 // one block per writer
	dataOff int64

	armed   atomic.Bool
	reached chan struct{} // the held write is in flight
	release chan struct{}
	once    sync.Once
	relOnce sync.Once

	afterFreeze atomic.Bool // set when Freeze has returned, cleared before Thaw
	mu          sync.Mutex
	violations  []string // member operations issued after Freeze returned

	stop  atomic.Bool
	wg    sync.WaitGroup
	acked atomic.Int64
	last  []atomic.Int64 // per writer: the last acknowledged value
	errs  []error        // per writer: the error that ended it
}

func newFreezeRig(t *testing.T, writers int) *freezeRig {
	r := &freezeRig{t: t, reached: make(chan struct{}), release: make(chan struct{}),
		last: make([]atomic.Int64, writers), errs: make([]error, writers)}
	hook := func(op memOp) error {
		if op.after {
			return nil
		}
		// Superblock reads (the fence checks of Thaw and of a metadata
		// write) are direct and harmless; every other operation counts.
		if r.afterFreeze.Load() && (op.write || op.flush || op.off >= r.dataOff) {
			r.mu.Lock()
			r.violations = append(r.violations, op.String())
			r.mu.Unlock()
		}
		if r.armed.Load() && op.write && op.off >= r.dataOff {
			r.once.Do(func() { close(r.reached); <-r.release })
		}
		return nil
	}
	cfg := integrityCfg()
	r.dataOff = cfg.DataOffset
	size := cfg.DataOffset + int64(writers+2)*layout.BlockSize*2
	var devs []Member
	r.hm, devs = hookMembers(3, size, hook)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r.v = v
	t.Cleanup(func() {
		// Whatever the test did: release the held write, stop the
		// writers (a frozen volume fails its held ones), close.
		r.releaseHeld()
		r.stop.Store(true)
		if v.Frozen() {
			v.Abandon()
		}
		r.wg.Wait()
		v.Abandon()
	})
	g := v.Geometry()
	for i := 0; i < writers; i++ {
		off := int64(i) * int64(g.K) * layout.BlockSize // first block of row i
		r.offs = append(r.offs, off)
		if _, err := v.WriteAt(blockOf(0, i), off); err != nil { // dirty its region now
			t.Fatal(err)
		}
	}
	return r
}

func blockOf(n int64, writer int) []byte {
	b := make([]byte, layout.BlockSize)
	copy(b, fmt.Sprintf("writer %d value %d", writer, n))
	return b
}

// start runs the writers until stop; each write's acknowledgement is
// counted and its value remembered.
func (r *freezeRig) start() {
	for i := range r.offs {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for n := int64(1); !r.stop.Load(); n++ {
				if _, err := r.v.WriteAt(blockOf(n, i), r.offs[i]); err != nil {
					r.errs[i] = err
					return
				}
				r.last[i].Store(n)
				r.acked.Add(1)
			}
		}()
	}
}

// waitHeld waits until n batches wait at the frozen gate.
func (r *freezeRig) waitHeld(n int) {
	g := &r.v.gate
	g.lock()
	for g.held < n {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

func (r *freezeRig) checkNoViolations(what string) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) > 0 {
		r.t.Fatalf("%s: member operations issued after Freeze returned: %v", what, r.violations)
	}
}

// freeze freezes the volume while the first armed data write is held in
// flight: Freeze must wait for it (and return only after it completed).
func (r *freezeRig) freeze() {
	r.t.Helper()
	r.armed.Store(true)
	<-r.reached
	draining := make(chan struct{})
	r.v.gate.drainWait = func() { close(draining) }
	returned := make(chan struct{})
	go func() {
		r.v.Freeze()
		r.afterFreeze.Store(true)
		close(returned)
	}()
	select {
	case <-draining:
	case <-returned:
		r.t.Fatal("Freeze returned while a member write was in flight")
	}
	r.releaseHeld()
	<-returned
}

func (r *freezeRig) releaseHeld() { r.relOnce.Do(func() { close(r.release) }) }

// Freeze waits for the member write in flight, then no member I/O is
// issued and no write is acknowledged; requests wait (they neither fail
// nor complete). Thaw with an epoch that is not newer is refused and
// changes nothing; Thaw with a newer one resumes them and writes the new
// epoch to every member.
func TestFreezeHoldsMemberIO(t *testing.T) {
	const writers = 4
	r := newFreezeRig(t, writers)
	epoch := r.v.Status().Epoch
	r.start()
	r.freeze()
	r.waitHeld(writers) // every writer is waiting at the gate
	acked := r.acked.Load()
	for _, e := range []uint64{epoch, epoch - 1} {
		if err := r.v.Thaw(e); !errors.Is(err, ErrStaleEpoch) {
			t.Fatalf("thaw at epoch %d (volume at %d): %v, want %v", e, epoch, err, ErrStaleEpoch)
		}
	}
	if !r.v.Frozen() || r.acked.Load() != acked {
		t.Fatalf("after a refused thaw: frozen %v, %d writes acknowledged while frozen", r.v.Frozen(), r.acked.Load()-acked)
	}
	r.waitHeld(writers)
	r.checkNoViolations("frozen")
	for i, err := range r.errs {
		if err != nil {
			t.Fatalf("writer %d failed while frozen: %v", i, err)
		}
	}

	r.afterFreeze.Store(false)
	if err := r.v.Thaw(epoch + 5); err != nil {
		t.Fatal(err)
	}
	for r.acked.Load() < acked+3*writers {
		runtime.Gosched()
	}
	r.stop.Store(true)
	r.wg.Wait()
	for i, err := range r.errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if st := r.v.Status(); st.Epoch != epoch+5 {
		t.Fatalf("status epoch %d after thaw, want %d", st.Epoch, epoch+5)
	}
	for _, h := range r.hm {
		if sb, err := superblock.ReadCopies(h.MemMember); err != nil || sb.Epoch != epoch+5 {
			t.Fatalf("slot %d superblock after thaw: epoch %v (%v), want %d", h.slot, sb.Epoch, err, epoch+5)
		}
	}
	got := make([]byte, layout.BlockSize)
	for i, off := range r.offs {
		if _, err := r.v.ReadAt(got, off); err != nil {
			t.Fatal(err)
		}
		if want := blockOf(r.last[i].Load(), i); !bytes.Equal(got, want) {
			t.Fatalf("writer %d: reads %q, last acknowledged %q", i, bytes.TrimRight(got, "\x00"), bytes.TrimRight(want, "\x00"))
		}
	}
}

// A frozen owner whose members were assembled meanwhile by a newer owner
// (a real assembly with a newer epoch) is refused at Thaw, even with an
// epoch newer than both: it is fenced for good, its held requests fail
// (never acknowledged), and it writes nothing to the members.
func TestThawFencedByNewerOwner(t *testing.T) {
	const writers = 2
	r := newFreezeRig(t, writers)
	epoch := r.v.Status().Epoch
	r.start()
	r.freeze()
	r.waitHeld(writers)
	acked := r.acked.Load()

	// The new owner assembles the same members at epoch+1 and writes.
	devs := make([]Member, len(r.hm))
	for i, h := range r.hm {
		devs[i] = h.MemMember
	}
	v2, err := Assemble(devs, nil, Options{Logger: quietLogger(), Epoch: epoch + 1})
	if err != nil {
		t.Fatal(err)
	}
	newData := bytes.Repeat([]byte{0xee}, layout.BlockSize)
	if _, err := v2.WriteAt(newData, r.offs[0]); err != nil {
		t.Fatal(err)
	}
	if err := v2.Flush(); err != nil {
		t.Fatal(err)
	}
	v2.Abandon()

	if err := r.v.Thaw(epoch + 2); !errors.Is(err, ErrFenced) {
		t.Fatalf("thaw after a newer owner ran: %v, want %v", err, ErrFenced)
	}
	r.stop.Store(true)
	r.wg.Wait()
	for i, err := range r.errs {
		if err == nil {
			t.Fatalf("writer %d: a request held while frozen was acknowledged after the fence", i)
		}
	}
	if r.acked.Load() != acked {
		t.Fatalf("%d writes acknowledged after the freeze", r.acked.Load()-acked)
	}
	r.checkNoViolations("fenced")
	for _, h := range r.hm {
		if sb, err := superblock.ReadCopies(h.MemMember); err != nil || sb.Epoch != epoch+1 {
			t.Fatalf("slot %d: epoch %v (%v) on disk, want the new owner's %d", h.slot, sb.Epoch, err, epoch+1)
		}
	}
	if err := r.v.Thaw(epoch + 3); err == nil {
		t.Fatal("a fenced volume thawed")
	}
	r.v.Abandon()
	v3, err := Assemble(devs, nil, Options{Logger: quietLogger(), Epoch: epoch + 3})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, layout.BlockSize)
	if _, err := v3.ReadAt(got, r.offs[0]); err != nil || !bytes.Equal(got, newData) {
		t.Fatalf("the new owner's write reads back %x (%v)", got[:4], err)
	}
	v3.Abandon()
}

// Thaw refuses while a writable member's superblock cannot be read
// (nothing proves no newer owner wrote it), and the volume stays frozen.
func TestThawNeedsEverySuperblock(t *testing.T) {
	var failReads atomic.Bool
	hook := func(op memOp) error {
		if failReads.Load() && op.slot == 1 && !op.write && !op.flush && op.off < superblock.CopyBOffset+superblock.CopySize {
			return errors.New("read error")
		}
		return nil
	}
	_, devs := hookMembers(3, integritySize, hook)
	v, err := Create(integrityCfg(), devs, nil, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	epoch := v.Status().Epoch
	v.Freeze()
	failReads.Store(true)
	if err := v.Thaw(epoch + 1); err == nil || !v.Frozen() {
		t.Fatalf("thaw with an unreadable superblock: %v, frozen %v", err, v.Frozen())
	}
	failReads.Store(false)
	if err := v.Thaw(epoch + 1); err != nil {
		t.Fatal(err)
	}
	if err := v.Thaw(epoch + 2); !errors.Is(err, ErrNotFrozen) {
		t.Fatalf("thaw of a running volume: %v", err)
	}
}

// Close of a frozen volume writes nothing; Abandon fails held requests.
func TestCloseFrozen(t *testing.T) {
	r := newFreezeRig(t, 1)
	r.start()
	r.freeze()
	r.waitHeld(1)
	if err := r.v.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("close of a frozen volume: %v", err)
	}
	r.wg.Wait()
	if r.errs[0] == nil {
		t.Fatal("a held write returned success after Close")
	}
	r.checkNoViolations("close")
}

// ReAdd and Replace refuse a device that holds this volume's metadata in a
// newer version (a newer owner assembled it): the volume is fenced and the
// device is not written (before the check, ReAdd wrote the bitmap and the
// journal header to it before the metadata write noticed the fence).
func TestReAddRefusesNewerOwner(t *testing.T) {
	for _, op := range []string{"re-add", "replace"} {
		t.Run(op, func(t *testing.T) {
			_, devs := hookMembers(3, integritySize, nil)
			hm := make([]*hookMember, 3)
			for i := range devs {
				hm[i] = devs[i].(*hookMember)
			}
			v, err := Create(integrityCfg(), devs, nil, Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Abandon()
			if err := v.FailMember(2); err != nil {
				t.Fatal(err)
			}
			if err := v.DetachFailed(2); err != nil {
				t.Fatal(err)
			}
			hm[2].MemMember.Reopen()
			fenceByNewOwner(t, hm[2:])
			before := snapshotMember(t, hm[2].MemMember)
			switch op {
			case "re-add":
				err = v.ReAdd(hm[2], "returned")
			case "replace":
				err = v.Replace(2, hm[2], "returned")
			}
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("%s of a newer owner's member: %v, want %v", op, err, ErrFenced)
			}
			if !bytes.Equal(before, snapshotMember(t, hm[2].MemMember)) {
				t.Fatalf("%s wrote to a newer owner's member", op)
			}
			if _, err := v.ReadAt(make([]byte, layout.BlockSize), 0); !errors.Is(err, ErrFenced) {
				t.Fatalf("read after the refusal: %v, want %v", err, ErrFenced)
			}
		})
	}
}

func snapshotMember(t *testing.T, m *MemMember) []byte {
	t.Helper()
	size, _ := m.Size()
	b := make([]byte, size)
	if _, err := m.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// Batches held at a frozen gate sleep until the gate changes: with two or
// more of them, none may wake the others (a busy loop that burns a CPU for
// as long as the volume stays frozen).
func TestFrozenGateHeldBatchesSleep(t *testing.T) {
	const writers = 3
	r := newFreezeRig(t, writers)
	r.start()
	r.freeze()
	r.waitHeld(writers)
	// The last arrivals' broadcasts woke the batches held before them
	// once: let those wakeups happen first.
	for range 2000 {
		runtime.Gosched()
	}
	g := &r.v.gate
	g.lock()
	before := g.wakeups
	g.mu.Unlock()
	for range 20000 {
		runtime.Gosched()
	}
	g.lock()
	woke := g.wakeups - before
	g.mu.Unlock()
	if woke != 0 {
		t.Fatalf("%d wakeups of %d held batches while the gate stayed frozen: they wake each other", woke, writers)
	}
}

// Status does not wait for a frozen volume whose metadata update is held
// at the gate (a member removal recorded while frozen): it returns the
// last snapshot, marked Stale. Without it, the daemon's reconcile, which
// asks a frozen engine's status before stopping it, hung until a thaw.
func TestStatusOfFrozenWithHeldMetadata(t *testing.T) {
	r := newFreezeRig(t, 1)
	before := r.v.Status()
	if before.Stale {
		t.Fatal("status of a running volume marked stale")
	}
	r.v.Freeze()
	removed := make(chan error, 1)
	go func() { removed <- r.v.MemberRemoved(2) }()
	// The removal holds metaMu while its metadata write waits at the gate.
	for r.v.metaMu.TryLock() {
		r.v.metaMu.Unlock()
		select {
		case err := <-removed:
			t.Fatalf("member removal finished on a frozen volume: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	got := make(chan Status, 1)
	go func() { got <- r.v.Status() }()
	select {
	case st := <-got:
		if !st.Stale || st.Epoch != before.Epoch || len(st.Members) != 3 || st.Members[2].Role != before.Members[2].Role {
			t.Errorf("status while frozen: stale %v, epoch %d, members %+v; want the last snapshot (epoch %d), stale", st.Stale, st.Epoch, st.Members, before.Epoch)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Status of a frozen volume with a held metadata write did not return")
	}
	r.v.Abandon()
	<-removed
}
