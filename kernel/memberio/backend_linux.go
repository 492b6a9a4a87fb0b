//go:build linux

package memberio

import (
	"fmt"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/kernel/ublk"
	"golang.org/x/sys/unix"
)

// Backend serves an engine volume on Members as a ublk backend (the
// Volume's methods) whose healthy reads, one-stripe degraded reads and
// one-stripe writes the ublk queue threads submit themselves
// (ublk.DirectReader, ublk.DirectWriter):
// such a request then costs no goroutine and no hand-off, only its member
// I/O on the queue's ring. Requests that touch a member that is not a
// *Member, or a buffer direct I/O cannot take, go the usual way.
type Backend struct {
	*engine.Volume
	// Stats, when set, counts the requests planned (Stats.DirectReads,
	// Stats.DirectWrites).
	Stats *Stats
}

// PlanRead implements ublk.DirectReader.
func (b Backend) PlanRead(p []byte, off int64) (ublk.PlannedRead, bool) {
	d, ok := b.Volume.PlanRead(p, off)
	if !ok {
		return nil, false
	}
	reads := make([]ublk.FileRead, len(d.IOs))
	for i, io := range d.IOs {
		m, ok := io.Dev.(*Member)
		if !ok || m.needsBounce(io.Buf) || m.checkRange(len(io.Buf), io.Off) != nil {
			d.Cancel()
			return nil, false
		}
		reads[i] = ublk.FileRead{Fd: m.fd, Buf: io.Buf, Off: io.Off}
	}
	if b.Stats != nil {
		b.Stats.DirectReads.Add(1)
	}
	return plannedRead{d: d, reads: reads}, true
}

type plannedRead struct {
	d     *engine.DirectRead
	reads []ublk.FileRead
}

func (r plannedRead) Reads() []ublk.FileRead { return r.reads }

func (r plannedRead) Finish(res []int32) error {
	for i := range r.d.IOs {
		io := &r.d.IOs[i]
		m := io.Dev.(*Member)
		switch {
		case res[i] < 0:
			io.Err = fmt.Errorf("member %s: read %d bytes at %d: %w", m.path, len(io.Buf), io.Off, unix.Errno(-res[i]))
		case int(res[i]) != len(io.Buf):
			io.Err = fmt.Errorf("member %s: read %d bytes at %d: short transfer of %d bytes", m.path, len(io.Buf), io.Off, res[i])
		}
	}
	_, err := r.d.Finish()
	return err
}

// PlanWrite implements ublk.DirectWriter.
func (b Backend) PlanWrite(p []byte, off int64) (ublk.PlannedWrite, bool) {
	d, ok := b.Volume.PlanWrite(p, off)
	if !ok {
		return nil, false
	}
	w := &plannedWrite{d: d}
	if !w.load() {
		// A member the queue cannot reach directly: nothing was
		// submitted, so the write fails no member; WriteAt redoes it.
		w.abandon()
		return nil, false
	}
	if b.Stats != nil {
		b.Stats.DirectWrites.Add(1)
	}
	return w, true
}

// plannedWrite carries an engine.DirectWrite's rounds as file I/O.
type plannedWrite struct {
	d   *engine.DirectWrite
	ios []ublk.FileIO
}

// load converts the current round; false when an IO is not on a *Member
// that takes its buffer directly.
func (w *plannedWrite) load() bool {
	w.ios = w.ios[:0]
	for _, io := range w.d.IOs {
		m, ok := io.Dev.(*Member)
		if !ok || io.Flush || m.needsBounce(io.Buf) || m.checkRange(len(io.Buf), io.Off) != nil {
			return false
		}
		w.ios = append(w.ios, ublk.FileIO{Fd: m.fd, Buf: io.Buf, Off: io.Off, Write: io.Write, FUA: io.FUA})
	}
	return true
}

// abandon ends a write whose first round the queue will not submit.
func (w *plannedWrite) abandon() {
	w.runRest()
	w.d.Finish()
}

// runRest performs the write's remaining rounds synchronously, through
// the members' own methods (each round already passed the volume's gate),
// and reports whether Finish may block.
func (w *plannedWrite) runRest() (block bool) {
	for more := true; more; {
		engine.SyncExecutor{}.Execute(w.d.IOs)
		more, block = w.d.Step()
	}
	return block
}

func (w *plannedWrite) IOs() []ublk.FileIO { return w.ios }

func (w *plannedWrite) Step(res []int32) (more, block bool) {
	for i := range w.d.IOs {
		io := &w.d.IOs[i]
		m := io.Dev.(*Member)
		op := "read"
		if io.Write {
			op = "write"
		}
		switch {
		case res[i] < 0:
			io.Err = fmt.Errorf("member %s: %s %d bytes at %d: %w", m.path, op, len(io.Buf), io.Off, unix.Errno(-res[i]))
		case int(res[i]) != len(io.Buf):
			io.Err = fmt.Errorf("member %s: %s %d bytes at %d: short transfer of %d bytes", m.path, op, len(io.Buf), io.Off, res[i])
		case io.Write && !io.FUA:
			m.written.Add(1) // the next flush of the member covers it
		}
	}
	more, block = w.d.Step()
	if more && !w.load() {
		// A member of this round that the first round did not touch
		// cannot take it directly: the rest runs here, blocking. (With
		// every member a *Member, as fabraidd opens them, it never does.)
		return false, w.runRest()
	}
	return more, block
}

func (w *plannedWrite) Finish() error {
	_, err := w.d.Finish()
	return err
}
