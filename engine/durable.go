package engine

import "fmt"

// writableIOs returns one IO per writable member, made by mk, and the slots
// they go to. sel (nil: every slot) restricts the slots considered.
func (v *Volume) writableIOs(sel func(slot int) bool, mk func(d Member) IO) ([]IO, []int) {
	var ios []IO
	var slots []int
	for slot := range v.slots {
		if sel != nil && !sel(slot) {
			continue
		}
		if d := v.dev(slot); d != nil && v.writable(slot) {
			ios = append(ios, mk(d))
			slots = append(slots, slot)
		}
	}
	return ios, slots
}

// writeDurable runs the writes ios as one Executor batch, then flushes
// every member whose writes all succeeded as a second batch (in parallel
// with a parallel or io_uring Executor). A member's flush error is set on
// each of its IOs. Nobody is failed here.
func (v *Volume) writeDurable(ios []IO) {
	v.exec.Execute(ios)
	var flushes []IO
	seen := map[Member]int{} // member -> index in flushes, -1 when a write failed
	for _, io := range ios {
		i, ok := seen[io.Dev]
		switch {
		case io.Err != nil:
			if ok && i >= 0 {
				flushes[i].Dev = nil
			}
			seen[io.Dev] = -1
		case !ok:
			seen[io.Dev] = len(flushes)
			flushes = append(flushes, IO{Dev: io.Dev, Flush: true})
		}
	}
	flushes = compactIOs(flushes)
	v.exec.Execute(flushes)
	for _, f := range flushes {
		if f.Err == nil {
			continue
		}
		for i := range ios {
			if ios[i].Dev == f.Dev && ios[i].Err == nil {
				ios[i].Err = f.Err
			}
		}
	}
}

func compactIOs(ios []IO) []IO {
	out := ios[:0]
	for _, io := range ios {
		if io.Dev != nil {
			out = append(out, io)
		}
	}
	return out
}

// failErrored fails the member of every IO that has an error (what names
// the operation) and reports whether the volume may acknowledge what these
// IOs were part of: nil when every failure is recorded on the survivors'
// superblocks; otherwise why not (a metadata write that failed, ErrFenced,
// ErrVolumeFailed).
func (v *Volume) failErrored(ios []IO, slots []int, what string) error {
	var first error
	for i := range ios {
		if ios[i].Err == nil {
			continue
		}
		if err := v.failMemberDev(slots[i], ios[i].Dev, fmt.Errorf("%s: %w", what, ios[i].Err)); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	return v.stopErr()
}

// syncWritable writes buf at off to every writable member selected by sel
// (nil: all) and flushes them; failing members are failed. See failErrored
// for the result.
func (v *Volume) syncWritable(what string, sel func(slot int) bool, buf []byte, off int64) error {
	ios, slots := v.writableIOs(sel, func(d Member) IO { return IO{Dev: d, Write: true, Buf: buf, Off: off} })
	v.writeDurable(ios)
	return v.failErrored(ios, slots, what)
}

// writeWritableFUA writes buf at off to every writable member selected by
// sel (nil: all) as FUA writes in one batch: durable on each member that
// succeeds, without flushing the members' other writes; failing members
// are failed. See failErrored for the result.
func (v *Volume) writeWritableFUA(what string, sel func(slot int) bool, buf []byte, off int64) error {
	ios, slots := v.writableIOs(sel, func(d Member) IO { return IO{Dev: d, Write: true, FUA: true, Buf: buf, Off: off} })
	v.exec.Execute(ios)
	return v.failErrored(ios, slots, what)
}

// flushWritable flushes every writable member selected by sel (nil: all)
// as one Executor batch; failing members are failed. See failErrored for
// the result.
func (v *Volume) flushWritable(sel func(slot int) bool) error {
	ios, slots := v.writableIOs(sel, func(d Member) IO { return IO{Dev: d, Flush: true} })
	v.exec.Execute(ios)
	return v.failErrored(ios, slots, "flush")
}

// stopErr reports why the volume must not acknowledge anything any more:
// ErrFenced (wrapping ErrHandedOff too once the volume handed its requests
// off: they go on failing over to the newer owner), ErrVolumeFailed, or
// nil.
func (v *Volume) stopErr() error {
	if v.fenced.Load() {
		if v.handedOff.Load() {
			return errFencedHandedOff
		}
		return ErrFenced
	}
	if v.failed.Load() {
		return ErrVolumeFailed
	}
	return nil
}
