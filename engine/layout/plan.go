package layout

import (
	"errors"
	"fmt"
	"math/bits"
)

// ErrTooManyFailures is returned when a stripe has more than M positions that
// cannot be read: its data is lost and must never be guessed.
var ErrTooManyFailures = errors.New("more than m chunks of a stripe unavailable")

// Mode is how a stripe write computes parity.
type Mode int

// Write modes.
const (
	// ModeFull: the request covers the whole stripe; encode, no reads.
	ModeFull Mode = iota + 1
	// ModeRMW: read-modify-write. Read old data of the touched chunks and
	// the old parity over [Lo, Hi), update parity by the difference.
	ModeRMW
	// ModeRCW: reconstruct-write. Read the data chunks the request does
	// not fully cover over [Lo, Hi), encode parity from the whole data.
	ModeRCW
	// ModeDegraded: a chunk the parity depends on cannot be read. Read K
	// readable chunks, reconstruct the missing data, then encode as RCW.
	ModeDegraded
)

func (m Mode) String() string {
	switch m {
	case ModeFull:
		return "full"
	case ModeRMW:
		return "rmw"
	case ModeRCW:
		return "rcw"
	case ModeDegraded:
		return "degraded"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Position masks: bit p is stripe position p (data 0..K-1, parity K..K+M-1).

// DataMask returns the mask of data positions.
func (g Geometry) DataMask() uint64 { return 1<<uint(g.K) - 1 }

// ParityMask returns the mask of parity positions.
func (g Geometry) ParityMask() uint64 { return (1<<uint(g.M) - 1) << uint(g.K) }

// AllMask returns the mask of every position.
func (g Geometry) AllMask() uint64 { return g.DataMask() | g.ParityMask() }

// WritePlan says how to perform one stripe write. All reads and parity
// writes cover the chunk range [Lo, Hi) of the StripeReq; data writes cover
// exactly the request's segments.
type WritePlan struct {
	Mode        Mode
	Read        uint64 // positions to read over [Lo, Hi) before computing
	Reconstruct uint64 // data positions to reconstruct from Read (ModeDegraded)
	Write       uint64 // positions to write (touched data and parity, minus unwritable)
}

// PlanWrite plans the write r given the positions that cannot be read
// (failed, or stale for this row) and those that cannot be written (failed;
// a subset of unreadable). It picks read-modify-write or reconstruct-write,
// whichever reads fewer chunks (ties go to reconstruct-write, which needs
// no old parity).
func PlanWrite(g Geometry, r StripeReq, unreadable, unwritable uint64) (WritePlan, error) {
	all := g.AllMask()
	unreadable &= all
	unwritable &= all
	if bits.OnesCount64(unreadable|unwritable) > g.M {
		return WritePlan{}, fmt.Errorf("stripe %d: %d chunks unavailable, m=%d: %w",
			r.Stripe, bits.OnesCount64(unreadable|unwritable), g.M, ErrTooManyFailures)
	}
	touched := r.Touched()
	write := (touched | g.ParityMask()) &^ unwritable
	if r.Full(g) {
		return WritePlan{Mode: ModeFull, Write: write}, nil
	}
	need := g.DataMask() &^ r.CoversHull() // old data the new parity depends on
	if unreadable == 0 {
		rmw := bits.OnesCount64(touched) + g.M
		rcw := bits.OnesCount64(need)
		if rmw < rcw {
			return WritePlan{Mode: ModeRMW, Read: touched | g.ParityMask(), Write: write}, nil
		}
		return WritePlan{Mode: ModeRCW, Read: need, Write: write}, nil
	}
	missing := need & unreadable
	if missing == 0 {
		return WritePlan{Mode: ModeRCW, Read: need, Write: write}, nil
	}
	return WritePlan{Mode: ModeDegraded, Read: chooseK(g, unreadable), Reconstruct: missing, Write: write}, nil
}

// chooseK picks K readable positions, data first: data chunks read for
// reconstruction are usually needed anyway, and parity is only a fallback.
func chooseK(g Geometry, unreadable uint64) uint64 {
	var sel uint64
	n := 0
	for p := 0; p < g.Width() && n < g.K; p++ {
		if unreadable&(1<<uint(p)) == 0 {
			sel |= 1 << uint(p)
			n++
		}
	}
	return sel
}

// ReadPlan says how to perform one stripe read.
type ReadPlan struct {
	// Direct data positions are read straight into the request buffer.
	Direct uint64
	// Read positions are read over [Lo, Hi) as input to reconstruct the
	// Reconstruct positions; zero when the stripe is healthy for r.
	Read, Reconstruct uint64
	Lo, Hi            int
}

// PlanRead plans the read r given the positions that cannot be read.
func PlanRead(g Geometry, r StripeReq, unreadable uint64) (ReadPlan, error) {
	unreadable &= g.AllMask()
	touched := r.Touched()
	missing := touched & unreadable
	p := ReadPlan{Direct: touched &^ unreadable}
	if missing == 0 {
		return p, nil
	}
	if bits.OnesCount64(unreadable) > g.M {
		return ReadPlan{}, fmt.Errorf("stripe %d: %d chunks unavailable, m=%d: %w",
			r.Stripe, bits.OnesCount64(unreadable), g.M, ErrTooManyFailures)
	}
	p.Lo, p.Hi = g.ChunkSize, 0
	for _, s := range r.Segs {
		if missing&(1<<uint(s.Pos)) != 0 {
			p.Lo = min(p.Lo, s.Off)
			p.Hi = max(p.Hi, s.Off+s.Len)
		}
	}
	p.Read = chooseK(g, unreadable)
	p.Reconstruct = missing
	return p, nil
}
