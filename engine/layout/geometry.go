package layout

import (
	"errors"
	"fmt"
	"math/bits"
)

// BlockSize is the logical block size of every fabraid volume in bytes.
const BlockSize = 4096

// Limits of the geometry.
const (
	MinChunkSize = 4 << 10
	MaxChunkSize = 1 << 20
	MaxParity    = 4
	// MaxWidth bounds K+M so that a stripe's positions fit a uint64 mask.
	MaxWidth = 64
)

// ErrGeometry is wrapped by every geometry validation error.
var ErrGeometry = errors.New("invalid geometry")

// Geometry describes how a volume is laid out over its members.
// It is a plain value; the zero value is invalid.
type Geometry struct {
	K         int   // data chunks per stripe, >= 2
	M         int   // parity chunks per stripe, 1..4
	Groups    int   // groups of K+M members, >= 1
	ChunkSize int   // bytes per chunk, power of two, 4 KiB..1 MiB
	Rows      int64 // rows (chunks) per member, >= 1
	// FixedParity keeps the parity positions on the group's last M
	// members in every row (data on the first K) instead of rotating
	// them: the owner-parity layout, where the owner's own members hold
	// only parity, so that losing them with the owner loses no data chunk.
	FixedParity bool
}

// Validate reports whether g is a usable geometry.
func (g Geometry) Validate() error {
	switch {
	case g.K < 2:
		return fmt.Errorf("%w: k=%d, need k >= 2", ErrGeometry, g.K)
	case g.M < 1 || g.M > MaxParity:
		return fmt.Errorf("%w: m=%d, need 1 <= m <= %d", ErrGeometry, g.M, MaxParity)
	case g.K+g.M > MaxWidth:
		return fmt.Errorf("%w: k+m=%d exceeds %d", ErrGeometry, g.K+g.M, MaxWidth)
	case g.Groups < 1:
		return fmt.Errorf("%w: groups=%d, need >= 1", ErrGeometry, g.Groups)
	case g.ChunkSize < MinChunkSize || g.ChunkSize > MaxChunkSize || bits.OnesCount(uint(g.ChunkSize)) != 1:
		return fmt.Errorf("%w: chunk size %d, need a power of two in [%d, %d]", ErrGeometry, g.ChunkSize, MinChunkSize, MaxChunkSize)
	case g.Rows < 1:
		return fmt.Errorf("%w: rows=%d, need >= 1", ErrGeometry, g.Rows)
	case g.Rows > (1<<62)/int64(g.ChunkSize)/int64(g.K)/int64(g.Groups):
		return fmt.Errorf("%w: size overflows", ErrGeometry)
	}
	return nil
}

// Width is the number of members in one group, K+M.
func (g Geometry) Width() int { return g.K + g.M }

// Members is the number of member slots of the volume, Groups*(K+M).
func (g Geometry) Members() int { return g.Groups * g.Width() }

// StripeBytes is the number of data bytes in one stripe.
func (g Geometry) StripeBytes() int64 { return int64(g.K) * int64(g.ChunkSize) }

// Stripes is the number of stripes of the volume.
func (g Geometry) Stripes() int64 { return int64(g.Groups) * g.Rows }

// Size is the usable size of the volume in bytes.
func (g Geometry) Size() int64 { return g.Stripes() * g.StripeBytes() }

// MemberDataBytes is the size of each member's data area in bytes.
func (g Geometry) MemberDataBytes() int64 { return g.Rows * int64(g.ChunkSize) }

// Locate returns the group and row of stripe s.
func (g Geometry) Locate(s int64) (group int, row int64) {
	return int(s % int64(g.Groups)), s / int64(g.Groups)
}

// StripeOf returns the stripe at row of group.
func (g Geometry) StripeOf(group int, row int64) int64 {
	return row*int64(g.Groups) + int64(group)
}

// MemberOf returns the member index within the group that holds stripe
// position pos (0..K-1 data, K..K+M-1 parity) in row.
func (g Geometry) MemberOf(row int64, pos int) int {
	if g.FixedParity {
		return pos
	}
	w := int64(g.Width())
	return int((int64(pos) + row%w) % w)
}

// PosOf is the inverse of MemberOf: the stripe position held by group
// member mem in row.
func (g Geometry) PosOf(row int64, mem int) int {
	if g.FixedParity {
		return mem
	}
	w := int64(g.Width())
	return int(((int64(mem)-row%w)%w + w) % w)
}

// Slot returns the volume-wide member slot of member mem of group.
func (g Geometry) Slot(group, mem int) int { return group*g.Width() + mem }

// MemberOffset returns the offset of row in a member's data area.
func (g Geometry) MemberOffset(row int64) int64 { return row * int64(g.ChunkSize) }

// Seg is the part of one request that falls into one data chunk of a stripe.
type Seg struct {
	Pos    int   // data position 0..K-1
	Off    int   // byte offset within the chunk
	Len    int   // bytes
	BufOff int64 // offset of these bytes within the request buffer
}

// StripeReq is the part of a request that falls into one stripe.
type StripeReq struct {
	Stripe int64
	Group  int
	Row    int64
	// Lo and Hi bound the union of the segments' chunk ranges: [Lo, Hi).
	// Parity is computed over exactly this range.
	Lo, Hi int
	Segs   []Seg // ascending Pos, non-empty
}

// Full reports whether the request covers the whole stripe.
func (r StripeReq) Full(g Geometry) bool {
	if len(r.Segs) != g.K {
		return false
	}
	for _, s := range r.Segs {
		if s.Off != 0 || s.Len != g.ChunkSize {
			return false
		}
	}
	return true
}

// Touched returns the bitmask of data positions that have a segment.
func (r StripeReq) Touched() uint64 {
	var m uint64
	for _, s := range r.Segs {
		m |= 1 << uint(s.Pos)
	}
	return m
}

// CoversHull returns the bitmask of data positions whose segment covers
// the whole [Lo, Hi) range.
func (r StripeReq) CoversHull() uint64 {
	var m uint64
	for _, s := range r.Segs {
		if s.Off == r.Lo && s.Off+s.Len == r.Hi {
			m |= 1 << uint(s.Pos)
		}
	}
	return m
}

// CheckRange reports whether [off, off+n) is a valid, block-aligned range of
// a volume of geometry g.
func (g Geometry) CheckRange(off int64, n int) error {
	if off < 0 || n < 0 || off%BlockSize != 0 || n%BlockSize != 0 {
		return fmt.Errorf("range [%d, +%d) is not aligned to %d-byte blocks", off, n, BlockSize)
	}
	if off > g.Size() || int64(n) > g.Size()-off {
		return fmt.Errorf("range [%d, +%d) beyond volume size %d", off, n, g.Size())
	}
	return nil
}

// Split cuts the logical range [off, off+n) into per-stripe requests, in
// ascending stripe order. The range must have been checked by CheckRange;
// Split itself only needs off >= 0 and n >= 0.
func (g Geometry) Split(off int64, n int) []StripeReq {
	reqs, _ := g.SplitAppend(nil, nil, off, n)
	return reqs
}

// ErrDomain is wrapped by CheckDomains errors.
var ErrDomain = errors.New("failure domain rule violated")

// CheckDomains checks that no group puts more than M of its members in one
// failure domain; domains[slot] is the domain of member slot. Losing a whole
// domain then costs every stripe at most M chunks.
func CheckDomains(g Geometry, domains []string) error {
	if len(domains) != g.Members() {
		return fmt.Errorf("%w: %d domains for %d members", ErrDomain, len(domains), g.Members())
	}
	for grp := 0; grp < g.Groups; grp++ {
		count := map[string]int{}
		for mem := 0; mem < g.Width(); mem++ {
			d := domains[g.Slot(grp, mem)]
			count[d]++
			if count[d] == g.M+1 {
				return fmt.Errorf("%w: group %d has more than m=%d members in domain %q; losing it would lose data",
					ErrDomain, grp, g.M, d)
			}
		}
	}
	return nil
}

// SplitAppend is Split without allocation in the steady state: it appends
// the stripe requests to reqs and their segments to segs (each request's
// Segs aliases segs) and returns both for reuse.
func (g Geometry) SplitAppend(reqs []StripeReq, segs []Seg, off int64, n int) ([]StripeReq, []Seg) {
	if n <= 0 {
		return reqs, segs
	}
	sb := g.StripeBytes()
	cs := int64(g.ChunkSize)
	first := off / sb
	last := (off + int64(n) - 1) / sb
	var bufOff int64
	for s := first; s <= last; s++ {
		grp, row := g.Locate(s)
		r := StripeReq{Stripe: s, Group: grp, Row: row, Lo: g.ChunkSize, Hi: 0}
		start := max(off, s*sb) - s*sb
		end := min(off+int64(n), (s+1)*sb) - s*sb
		i0 := len(segs)
		for c := start / cs; c*cs < end; c++ {
			a := max(start, c*cs) - c*cs
			b := min(end, (c+1)*cs) - c*cs
			segs = append(segs, Seg{Pos: int(c), Off: int(a), Len: int(b - a), BufOff: bufOff})
			bufOff += b - a
			r.Lo = min(r.Lo, int(a))
			r.Hi = max(r.Hi, int(b))
		}
		r.Segs = segs[i0:len(segs):len(segs)]
		reqs = append(reqs, r)
	}
	return reqs, segs
}
