//go:build linux

package memberio

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/kernel/uring"
	"golang.org/x/sys/unix"
)

// ExecutorConfig tunes an Executor; the zero value is usable.
type ExecutorConfig struct {
	// Entries is the size of each ring's submission queue (default 64); a
	// batch with more I/Os is submitted in several rounds.
	Entries uint32
	// MaxIdleRings is how many rings are kept for reuse (default 64): one
	// ring serves one batch at a time, so this is the number of batches
	// that run concurrently without setting up a ring.
	MaxIdleRings int
}

// Executor is an engine.Executor that submits the I/O of a batch on
// Members to an io_uring in one io_uring_enter and waits for their
// completions in the calling goroutine: no goroutine per I/O, no hand-off.
// Concurrent batches use different rings from a pool. IOs on other
// engine.Member types run synchronously, one after another. Execute returns
// only when every IO completed, with each IO's error in its Err.
type Executor struct {
	cfg ExecutorConfig

	mu     sync.Mutex
	free   []*uring.Ring
	closed bool

	aux   sync.Pool // *[]ioAux
	stats Stats
}

// ioAux is the per-I/O state of a batch.
type ioAux struct {
	m      *Member
	bounce []byte // aligned copy of Buf, or nil
	gen    uint64 // flush: the write count it covers
}

// NewExecutor returns an Executor; it fails (wrapping uring.ErrNotSupported
// where that is the cause) when the kernel cannot set up an io_uring.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	if cfg.Entries == 0 {
		cfg.Entries = 64
	}
	if cfg.MaxIdleRings <= 0 {
		cfg.MaxIdleRings = 64
	}
	e := &Executor{cfg: cfg}
	r, err := e.newRing()
	if err != nil {
		return nil, err
	}
	e.free = append(e.free, r)
	return e, nil
}

func (e *Executor) newRing() (*uring.Ring, error) {
	r, err := uring.New(e.cfg.Entries, &uring.Config{CQEntries: 2 * e.cfg.Entries})
	if err != nil {
		return nil, fmt.Errorf("member I/O ring: %w", err)
	}
	return r, nil
}

func (e *Executor) getRing() (*uring.Ring, error) {
	e.mu.Lock()
	if n := len(e.free); n > 0 {
		r := e.free[n-1]
		e.free = e.free[:n-1]
		e.mu.Unlock()
		return r, nil
	}
	e.mu.Unlock()
	return e.newRing()
}

func (e *Executor) putRing(r *uring.Ring) {
	e.mu.Lock()
	if !e.closed && len(e.free) < e.cfg.MaxIdleRings {
		e.free = append(e.free, r)
		r = nil
	}
	e.mu.Unlock()
	if r != nil {
		r.Close()
	}
}

// Close releases the idle rings. Batches still running close theirs when
// they end.
func (e *Executor) Close() error {
	e.mu.Lock()
	free := e.free
	e.free, e.closed = nil, true
	e.mu.Unlock()
	var errs []error
	for _, r := range free {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// Stats returns the executor's counters.
func (e *Executor) Stats() *Stats { return &e.stats }

// Execute implements engine.Executor.
func (e *Executor) Execute(ios []engine.IO) {
	if len(ios) == 0 {
		return
	}
	e.stats.Batches.Add(1)
	auxp := e.getAux(len(ios))
	aux := *auxp
	defer e.putAux(auxp)
	ring := 0
	for i := range ios {
		m, ok := ios[i].Dev.(*Member)
		if !ok {
			engine.SyncExecutor{}.Execute(ios[i : i+1])
			continue
		}
		aux[i].m = m
		ring++
	}
	if ring == 0 {
		return
	}
	r, err := e.getRing()
	if err != nil {
		for i := range ios {
			if aux[i].m != nil {
				ios[i].Err = err
			}
		}
		return
	}
	if e.run(r, ios, aux) {
		e.putRing(r)
	} else {
		r.Close()
	}
}

// run submits the Member IOs of the batch and reaps their completions,
// keeping at most Entries in flight (so the completion queue, twice that,
// cannot overflow). It reports whether the ring is fit for reuse.
func (e *Executor) run(r *uring.Ring, ios []engine.IO, aux []ioAux) bool {
	next, inflight := 0, 0
	for {
		for next < len(ios) && inflight < int(e.cfg.Entries) {
			if aux[next].m != nil {
				queued, ok := e.prep(r, ios, aux, next)
				if !ok {
					break
				}
				if queued {
					inflight++
				}
			}
			next++
		}
		if inflight == 0 {
			return true // next == len(ios): every IO is done
		}
		if err := e.enter(r, uint32(inflight)); err != nil {
			// The ring cannot be waited on: fail what has not completed.
			// The kernel cancels the rest when the ring is closed.
			for i := range ios {
				if aux[i].m != nil && aux[i].gen != doneMark {
					ios[i].Err = fmt.Errorf("member %s: %w", aux[i].m.path, err)
				}
			}
			return false
		}
		inflight -= r.ForEachCQE(func(c uring.CQE) { e.complete(ios, aux, int(c.UserData), c.Res) })
	}
}

// doneMark in ioAux.gen marks an IO completed (success) when the ring is
// abandoned; real flush generations never reach it.
const doneMark = ^uint64(0)

// enter submits pending entries and waits until want completions are in
// the completion queue (every I/O in flight: Execute returns only when all
// are done, so waking for each one would only cost io_uring_enter calls),
// retrying transient refusals.
func (e *Executor) enter(r *uring.Ring, want uint32) error {
	for attempt := 0; ; attempt++ {
		e.stats.Enters.Add(1)
		_, err := r.SubmitAndWait(want)
		if err == nil {
			return nil
		}
		if (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY)) && attempt < 1000 {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		return err
	}
}

// prep queues IO i (queued) or completes it at once when it needs no
// kernel call (a clean member's flush) or is refused (unaligned). ok is
// false when the ring has no free entry.
func (e *Executor) prep(r *uring.Ring, ios []engine.IO, aux []ioAux, i int) (queued, ok bool) {
	io, a := &ios[i], &aux[i]
	m := a.m
	if io.Flush {
		gen, dirty := m.flushStart()
		if !dirty {
			io.Err = nil
			a.gen = doneMark
			return false, true
		}
		sqe, err := r.NextSQE()
		if err != nil {
			m.stats.Flushes.Add(-1) // counted again when retried
			return false, false
		}
		a.gen = gen
		sqe.PrepFsync(m.fd, uring.FsyncDataSync, uint64(i))
		e.stats.IOs.Add(1)
		return true, true
	}
	if err := m.checkRange(len(io.Buf), io.Off); err != nil {
		io.Err = err
		a.gen = doneMark
		return false, true
	}
	sqe, err := r.NextSQE()
	if err != nil {
		return false, false
	}
	buf := io.Buf
	if m.needsBounce(buf) {
		a.bounce = m.bounce(len(buf))
		e.stats.Bounces.Add(1)
		if io.Write {
			copy(a.bounce, buf)
		}
		buf = a.bounce
	}
	if io.Write {
		sqe.PrepWrite(m.fd, buf, io.Off, uint64(i))
		if io.FUA {
			sqe.OpFlags = unix.RWF_DSYNC // rw_flags: see Member.WriteAtFUA
		}
	} else {
		sqe.PrepRead(m.fd, buf, io.Off, uint64(i))
	}
	e.stats.IOs.Add(1)
	return true, true
}

// complete records the result of IO i.
func (e *Executor) complete(ios []engine.IO, aux []ioAux, i int, res int32) {
	io, a := &ios[i], &aux[i]
	m := a.m
	if io.Flush {
		if res < 0 {
			io.Err = fmt.Errorf("member %s: flush: %w", m.path, unix.Errno(-res))
		} else {
			m.flushDone(a.gen)
			io.Err = nil
		}
		a.gen = doneMark
		return
	}
	op := "read"
	if io.Write {
		op = "write"
	}
	switch {
	case res < 0:
		io.Err = fmt.Errorf("member %s: %s %d bytes at %d: %w", m.path, op, len(io.Buf), io.Off, unix.Errno(-res))
	case int(res) != len(io.Buf):
		io.Err = fmt.Errorf("member %s: %s %d bytes at %d: short transfer of %d bytes", m.path, op, len(io.Buf), io.Off, res)
	default:
		io.Err = nil
		switch {
		case io.Write && !io.FUA:
			m.written.Add(1) // an FUA write is durable: nothing for a flush
		case !io.Write && a.bounce != nil:
			copy(io.Buf, a.bounce)
		}
	}
	a.gen = doneMark
}

func (e *Executor) getAux(n int) *[]ioAux {
	p, _ := e.aux.Get().(*[]ioAux)
	if p == nil {
		p = new([]ioAux)
	}
	if cap(*p) < n {
		*p = make([]ioAux, n)
	}
	*p = (*p)[:n]
	return p
}

func (e *Executor) putAux(p *[]ioAux) {
	clear(*p)
	e.aux.Put(p)
}
