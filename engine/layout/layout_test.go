package layout

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"testing"
)

func smallGeometries() []Geometry {
	var out []Geometry
	for k := 2; k <= 6; k++ {
		for m := 1; m <= 4; m++ {
			for groups := 1; groups <= 3; groups++ {
				for _, fixed := range []bool{false, true} {
					out = append(out, Geometry{K: k, M: m, Groups: groups, ChunkSize: 4096, Rows: int64(2*(k+m) + 1), FixedParity: fixed})
				}
			}
		}
	}
	return out
}

// Every logical block maps to exactly one data chunk block, and no data
// block lands on a parity position.
func TestMappingBijective(t *testing.T) {
	for _, g := range smallGeometries() {
		if err := g.Validate(); err != nil {
			t.Fatal(err)
		}
		type loc struct {
			slot int
			off  int64
		}
		seen := map[loc]int64{}
		blocks := g.Size() / BlockSize
		for b := int64(0); b < blocks; b++ {
			reqs := g.Split(b*BlockSize, BlockSize)
			if len(reqs) != 1 || len(reqs[0].Segs) != 1 {
				t.Fatalf("%+v: block %d split into %+v", g, b, reqs)
			}
			r := reqs[0]
			s := r.Segs[0]
			if s.Pos < 0 || s.Pos >= g.K || s.Len != BlockSize {
				t.Fatalf("%+v: block %d bad seg %+v", g, b, s)
			}
			mem := g.MemberOf(r.Row, s.Pos)
			if g.PosOf(r.Row, mem) != s.Pos {
				t.Fatalf("PosOf does not invert MemberOf")
			}
			l := loc{g.Slot(r.Group, mem), g.MemberOffset(r.Row) + int64(s.Off)}
			if prev, dup := seen[l]; dup {
				t.Fatalf("%+v: blocks %d and %d both map to %+v", g, prev, b, l)
			}
			seen[l] = b
		}
		// Data blocks + parity blocks = all member blocks.
		if int64(len(seen)) != int64(g.Members())*g.MemberDataBytes()/BlockSize*int64(g.K)/int64(g.Width()) {
			t.Fatalf("%+v: %d data blocks", g, len(seen))
		}
	}
}

// Each row puts exactly one position on each member; parity rotates so each
// member holds parity in M of every K+M consecutive rows, or, with
// FixedParity, the last M members hold parity in every row.
func TestParityPlacement(t *testing.T) {
	for _, g := range smallGeometries() {
		w := g.Width()
		parityCount := make([]int, w)
		for row := int64(0); row < int64(w); row++ {
			used := uint64(0)
			for pos := 0; pos < w; pos++ {
				mem := g.MemberOf(row, pos)
				if used&(1<<uint(mem)) != 0 {
					t.Fatalf("%+v row %d: member %d used twice", g, row, mem)
				}
				used |= 1 << uint(mem)
				if pos >= g.K {
					parityCount[mem]++
				}
			}
		}
		for mem, c := range parityCount {
			want := g.M
			if g.FixedParity {
				want = 0
				if mem >= g.K {
					want = w
				}
			}
			if c != want {
				t.Fatalf("%+v: member %d holds parity in %d of %d rows, want %d", g, mem, c, w, want)
			}
		}
	}
}

func TestSplitCoversRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range smallGeometries() {
		size := g.Size()
		for i := 0; i < 200; i++ {
			off := rng.Int64N(size/BlockSize) * BlockSize
			n := int(rng.Int64N((size-off)/BlockSize+1)) * BlockSize
			if err := g.CheckRange(off, n); err != nil {
				t.Fatal(err)
			}
			var next int64
			pos := off
			for _, r := range g.Split(off, n) {
				if r.Lo >= r.Hi || len(r.Segs) == 0 {
					t.Fatalf("empty stripe req %+v", r)
				}
				for _, s := range r.Segs {
					if s.BufOff != next {
						t.Fatalf("buffer gap at %d", next)
					}
					logical := r.Stripe*g.StripeBytes() + int64(s.Pos)*int64(g.ChunkSize) + int64(s.Off)
					if logical != pos {
						t.Fatalf("logical %d, want %d", logical, pos)
					}
					if s.Off < r.Lo || s.Off+s.Len > r.Hi {
						t.Fatalf("seg outside hull")
					}
					next += int64(s.Len)
					pos += int64(s.Len)
				}
			}
			if next != int64(n) {
				t.Fatalf("split covers %d of %d bytes", next, n)
			}
		}
	}
}

func TestCheckRange(t *testing.T) {
	g := Geometry{K: 2, M: 1, Groups: 1, ChunkSize: 4096, Rows: 4}
	for _, tc := range []struct {
		off int64
		n   int
		ok  bool
	}{{0, 0, true}, {0, 4096, true}, {0, int(g.Size()), true}, {1, 4096, false}, {0, 100, false},
		{g.Size(), 0, true}, {g.Size(), 4096, false}, {-4096, 4096, false}} {
		if err := g.CheckRange(tc.off, tc.n); (err == nil) != tc.ok {
			t.Errorf("CheckRange(%d,%d) = %v", tc.off, tc.n, err)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Geometry{K: 4, M: 2, Groups: 1, ChunkSize: 64 << 10, Rows: 10}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Geometry){
		"k1":      func(g *Geometry) { g.K = 1 },
		"m0":      func(g *Geometry) { g.M = 0 },
		"m5":      func(g *Geometry) { g.M = 5 },
		"chunk3":  func(g *Geometry) { g.ChunkSize = 3 << 12 },
		"chunk2":  func(g *Geometry) { g.ChunkSize = 2048 },
		"chunk2M": func(g *Geometry) { g.ChunkSize = 2 << 20 },
		"groups":  func(g *Geometry) { g.Groups = 0 },
		"rows":    func(g *Geometry) { g.Rows = 0 },
		"wide":    func(g *Geometry) { g.K = 63 },
	} {
		g := good
		mut(&g)
		if err := g.Validate(); !errors.Is(err, ErrGeometry) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func TestCheckDomains(t *testing.T) {
	g := Geometry{K: 4, M: 2, Groups: 2, ChunkSize: 4096, Rows: 1}
	ok := []string{"a", "a", "b", "b", "c", "c", "a", "b", "c", "d", "e", "f"}
	if err := CheckDomains(g, ok); err != nil {
		t.Fatal(err)
	}
	bad := []string{"a", "a", "b", "b", "c", "c", "x", "x", "x", "d", "e", "f"}
	if err := CheckDomains(g, bad); !errors.Is(err, ErrDomain) {
		t.Fatalf("CheckDomains = %v", err)
	}
}

// Plans never read an unreadable position, always read enough to compute
// parity, and pick the cheaper of RMW and RCW when healthy.
func TestPlanWriteProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, g := range smallGeometries() {
		g.Groups = 1
		for i := 0; i < 300; i++ {
			off := rng.Int64N(g.Size()/BlockSize) * BlockSize
			maxN := min(g.StripeBytes()-off%g.StripeBytes(), g.Size()-off)
			n := int(1+rng.Int64N(maxN/BlockSize)) * BlockSize
			r := g.Split(off, n)[0]
			var unreadable uint64
			for p := 0; p < g.Width(); p++ {
				if rng.IntN(4) == 0 {
					unreadable |= 1 << uint(p)
				}
			}
			unwritable := unreadable & uint64(rng.Uint64())
			plan, err := PlanWrite(g, r, unreadable, unwritable)
			if bits.OnesCount64(unreadable) > g.M {
				if !errors.Is(err, ErrTooManyFailures) {
					t.Fatalf("%+v: %d unreadable, err %v", g, bits.OnesCount64(unreadable), err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Read&unreadable != 0 {
				t.Fatalf("plan reads unreadable: %+v", plan)
			}
			if plan.Write&unwritable != 0 {
				t.Fatalf("plan writes unwritable: %+v", plan)
			}
			if plan.Write&g.ParityMask() != g.ParityMask()&^unwritable {
				t.Fatalf("plan does not write all parity: %+v", plan)
			}
			need := g.DataMask() &^ r.CoversHull()
			switch plan.Mode {
			case ModeFull:
				if !r.Full(g) || plan.Read != 0 {
					t.Fatalf("bad full plan %+v", plan)
				}
			case ModeRCW:
				if plan.Read != need {
					t.Fatalf("rcw reads %b, need %b", plan.Read, need)
				}
				if unreadable == 0 && bits.OnesCount64(need) > bits.OnesCount64(r.Touched())+g.M {
					t.Fatalf("rcw chosen but rmw reads less")
				}
			case ModeRMW:
				if unreadable != 0 || plan.Read != r.Touched()|g.ParityMask() {
					t.Fatalf("bad rmw plan %+v", plan)
				}
				if bits.OnesCount64(plan.Read) >= bits.OnesCount64(need) {
					t.Fatalf("rmw chosen but rcw reads no more")
				}
			case ModeDegraded:
				if bits.OnesCount64(plan.Read) != g.K || plan.Reconstruct != need&unreadable || plan.Reconstruct == 0 {
					t.Fatalf("bad degraded plan %+v", plan)
				}
			}
			rp, err := PlanRead(g, r, unreadable)
			if err != nil {
				t.Fatal(err)
			}
			if rp.Direct|rp.Reconstruct != r.Touched() || rp.Read&unreadable != 0 || rp.Direct&unreadable != 0 {
				t.Fatalf("bad read plan %+v", rp)
			}
			if rp.Reconstruct != 0 && bits.OnesCount64(rp.Read) != g.K {
				t.Fatalf("read plan reads %d shards", bits.OnesCount64(rp.Read))
			}
		}
	}
}
