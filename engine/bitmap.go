package engine

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// bitmapBlock is the unit in which the write-intent bitmap is written.
const bitmapBlock = 4096

// bitset is a fixed-size set of regions; the on-disk encoding is bit i of
// byte i/8, least significant bit first.
type bitset []uint64

func newBitset(n int64) bitset     { return make(bitset, (n+63)/64) }
func (b bitset) test(i int64) bool { return b[i/64]&(1<<uint(i%64)) != 0 }
func (b bitset) set(i int64)       { b[i/64] |= 1 << uint(i%64) }
func (b bitset) clone() bitset     { return append(bitset(nil), b...) }
func (b bitset) any() bool         { return b.next(0) >= 0 }
func (b bitset) count() (n int64) {
	for i := int64(0); i < int64(len(b))*64; i++ {
		if b.test(i) {
			n++
		}
	}
	return n
}

// next returns the first set bit >= i, or -1.
func (b bitset) next(i int64) int64 {
	for ; i < int64(len(b))*64; i++ {
		if b[i/64] == 0 {
			i |= 63
			continue
		}
		if b.test(i) {
			return i
		}
	}
	return -1
}

func decodeBitset(p []byte, n int64) bitset {
	b := newBitset(n)
	for i := int64(0); i < n && i/8 < int64(len(p)); i++ {
		if p[i/8]&(1<<uint(i%8)) != 0 {
			b.set(i)
		}
	}
	return b
}

// encodeBlock writes bitmap block blk of the region bits in words.
func encodeBlock(dst []byte, load func(w int) uint64, nwords int, blk int) {
	clear(dst)
	first := blk * bitmapBlock / 8
	for w := 0; w < bitmapBlock/8 && first+w < nwords; w++ {
		binary.LittleEndian.PutUint64(dst[w*8:], load(first+w))
	}
}

// writeIntent is the in-memory write-intent bitmap. A set bit means the
// region may hold stripes whose parity does not match their data.
//
// Protocol: a writer announces itself in inflight[r] and then, if bit r is
// not set, sets it durably on every member (slow path, under mu) before it
// writes any data. The fast path (bit already set) takes no lock. Bits are
// cleared lazily in a clean session (cleanMu held from idleCandidates to
// clear, one session at a time): the candidates are the set regions in
// which no write began or completed since the previous session; the
// members are then flushed; clear drops the candidates that saw a write
// begin or complete meanwhile or still have one in flight. So a cleared
// region's last write completed before the session began, hence before
// its member flush. A cleared bit is re-checked against inflight before it
// is written, so a writer that saw the bit set never loses it.
type writeIntent struct {
	regionRows int64
	n          int64
	words      []atomic.Uint64
	inflight   []atomic.Int32
	touched    []atomic.Bool
	endForgets bool // re-introduced bug (faults.go)

	cleanMu sync.Mutex // one clean session (idleCandidates ... clear) at a time
	mu      sync.Mutex // serialises persisting; never held on the fast path
	// persist writes bitmap block blk (bitmapBlock bytes) to every member
	// and flushes them.
	persist func(blk int, data []byte) error
}

func newWriteIntent(regionRows, rows int64, initial bitset, persist func(int, []byte) error) *writeIntent {
	n := (rows + regionRows - 1) / regionRows
	w := &writeIntent{
		regionRows: regionRows, n: n,
		words:    make([]atomic.Uint64, (n+63)/64),
		inflight: make([]atomic.Int32, n),
		touched:  make([]atomic.Bool, n),
		persist:  persist,
	}
	for i := range w.words {
		if i < len(initial) {
			w.words[i].Store(initial[i])
		}
	}
	return w
}

func (w *writeIntent) region(row int64) int64 { return row / w.regionRows }

func (w *writeIntent) isSet(r int64) bool { return w.words[r/64].Load()&(1<<uint(r%64)) != 0 }

func (w *writeIntent) snapshot() bitset {
	b := make(bitset, len(w.words))
	for i := range w.words {
		b[i] = w.words[i].Load()
	}
	return b
}

func (w *writeIntent) block(blk int) []byte {
	buf := make([]byte, bitmapBlock)
	encodeBlock(buf, func(i int) uint64 { return w.words[i].Load() }, len(w.words), blk)
	return buf
}

// begin announces a write to region r and returns once bit r is durable.
func (w *writeIntent) begin(r int64) error {
	w.inflight[r].Add(1)
	w.touched[r].Store(true)
	if w.isSet(r) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.isSet(r) {
		return nil
	}
	blk := int(r / (bitmapBlock * 8))
	buf := w.block(blk)
	bit := r % (bitmapBlock * 8)
	buf[bit/8] |= 1 << uint(bit%8)
	if err := w.persist(blk, buf); err != nil {
		w.inflight[r].Add(-1)
		return err
	}
	w.words[r/64].Or(1 << uint(r%64))
	return nil
}

// tryBegin is begin when bit r is already durable; it reports false (and
// announces nothing) when setting it would take a member write.
func (w *writeIntent) tryBegin(r int64) bool {
	w.inflight[r].Add(1)
	w.touched[r].Store(true)
	if w.isSet(r) {
		return true
	}
	w.inflight[r].Add(-1)
	return false
}

// end retires a write announced by begin. The region counts as touched
// until the next clean session: the write's member writes completed, but a
// session already under way may have flushed the members before them.
func (w *writeIntent) end(r int64) {
	if !w.endForgets {
		w.touched[r].Store(true)
	}
	w.inflight[r].Add(-1)
}

// idleCandidates returns the set regions that saw no write begin or
// complete since the previous call and resets the write history: step 1 of
// a clean session. Callers hold cleanMu until clear.
func (w *writeIntent) idleCandidates() []int64 {
	var c []int64
	for r := int64(0); r < w.n; r++ {
		if !w.touched[r].Swap(false) && w.isSet(r) {
			c = append(c, r)
		}
	}
	return c
}

// anySet reports whether a bit is set.
func (w *writeIntent) anySet() bool {
	for i := range w.words {
		if w.words[i].Load() != 0 {
			return true
		}
	}
	return false
}

// allSet returns every set region (for a clean shutdown).
func (w *writeIntent) allSet() []int64 {
	var c []int64
	for r := int64(0); r < w.n; r++ {
		if w.isSet(r) {
			c = append(c, r)
		}
	}
	return c
}

// clear clears the bits of cands that still saw no write and have none in
// flight: step 2 of a clean session, called under cleanMu after every
// member was flushed (so every write that completed before idleCandidates
// is durable). inflight is read before touched: end marks touched before
// it leaves inflight. A cleared bit is re-checked against writers that
// raced with the clear and restored for them; only then are the changed
// blocks written.
func (w *writeIntent) clear(cands []int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var cleared []int64
	for _, r := range cands {
		if w.busy(r) {
			continue
		}
		w.words[r/64].And(^(uint64(1) << uint(r%64)))
		cleared = append(cleared, r)
	}
	dirtyBlocks := map[int]bool{}
	for _, r := range cleared {
		if w.busy(r) {
			// A writer saw the bit set before we cleared it.
			w.words[r/64].Or(1 << uint(r%64))
			continue
		}
		dirtyBlocks[int(r/(bitmapBlock*8))] = true
	}
	for blk := range dirtyBlocks {
		if err := w.persist(blk, w.block(blk)); err != nil {
			return err
		}
	}
	return nil
}

// busy reports whether region r has a write in flight or saw one begin or
// complete in this clean session.
func (w *writeIntent) busy(r int64) bool {
	return w.inflight[r].Load() != 0 || w.touched[r].Load()
}
