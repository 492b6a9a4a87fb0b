//go:build linux

package memberio

import (
	"fmt"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/kernel/ublk"
	"golang.org/x/sys/unix"
)

// Backend serves an engine volume on Members as a ublk backend (the
// Volume's methods) whose healthy reads the ublk queue threads submit
// themselves (ublk.DirectReader): a read then costs no goroutine and no
// hand-off, only the member reads on the queue's ring. Reads that touch a
// member that is not a *Member, or a buffer direct I/O cannot take, go the
// usual way.
type Backend struct {
	*engine.Volume
	// Stats, when set, counts the reads planned (Stats.DirectReads).
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
