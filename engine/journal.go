package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// The stripe journal closes the write hole of a degraded group: before a
// write to a stripe whose data chunks are not all durably readable, the
// post-write contents of those chunks (over the write's chunk range) are
// logged to surviving members of the group and flushed. After an unclean
// stop, assembly recomputes the parity of every logged stripe from the
// surviving data and the logged chunks, so the missing chunks reconstruct
// to what the log says: their old contents where the write did not touch
// them, the new contents where it did. The on-disk format is in
// docs/on-disk-format.md, "Stripe journal"; the argument in
// docs/engine.md, "Stripe journal".

const (
	journalBlock     = 4096
	journalRecMagic  = "FBRJREC1"
	journalHdrMagic  = "FBRJHDR1"
	journalHdrBlocks = 2 // header copies A and B
	journalMaxPos    = 8 // position slots in a record header (m <= 4 are used)
	jCRC             = journalBlock - 4
)

// journalSeqGap separates the sequence numbers of successive assemblies:
// it exceeds the number of records that can be unretired at once (every
// member's journal area full of 4 KiB records), so records left on a
// member that missed an assembly are always retired by it.
func journalSeqGap(sb *superblock.Superblock) uint64 {
	return uint64(sb.Geometry.Members())*uint64(sb.JournalBytes/journalBlock) + 1
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// jrecord is one decoded journal record.
type jrecord struct {
	seq    uint64
	epoch  uint64
	stripe int64
	lo, hi int
	mask   uint64   // logged data positions
	data   [][]byte // hi-lo bytes per logged position, ascending position
}

// journalRecordSize is the on-disk size of a record logging n positions
// over a range of span bytes.
func journalRecordSize(n, span int) int { return journalBlock + n*span }

// encodeRecordHeader fills the header block of a record. payloadCRC is the
// CRC32C of the payload (the positions' data in ascending order).
func encodeRecordHeader(h []byte, uuid [16]byte, selfOff int64, r *jrecord, payloadCRC uint32) {
	clear(h[:journalBlock])
	le := binary.LittleEndian
	copy(h[0:8], journalRecMagic)
	le.PutUint64(h[8:], r.seq)
	copy(h[16:32], uuid[:])
	le.PutUint64(h[32:], r.epoch)
	le.PutUint64(h[40:], uint64(r.stripe))
	le.PutUint64(h[48:], uint64(selfOff))
	le.PutUint32(h[56:], uint32(r.lo))
	le.PutUint32(h[60:], uint32(r.hi))
	n := 0
	for p := 0; p < 64; p++ {
		if r.mask&(1<<uint(p)) != 0 {
			h[72+n] = byte(p)
			n++
		}
	}
	le.PutUint32(h[64:], uint32(n))
	le.PutUint32(h[68:], payloadCRC)
	le.PutUint32(h[jCRC:], crc32.Checksum(h[:jCRC], castagnoli))
}

var errBadRecord = errors.New("not a valid journal record")

// parseRecord decodes the record whose header starts buf, at member offset
// selfOff. buf may extend past the record (to the end of the journal
// area). It rejects anything not written whole by this volume: wrong
// magic, volume, self offset, a header or payload CRC mismatch (a torn
// record), out-of-range fields. The returned data aliases buf.
func parseRecord(buf []byte, selfOff int64, uuid [16]byte, g layout.Geometry) (*jrecord, int, error) {
	bad := func(why string) (*jrecord, int, error) { return nil, 0, fmt.Errorf("%w: %s", errBadRecord, why) }
	if len(buf) < journalBlock {
		return bad("short")
	}
	h := buf[:journalBlock]
	le := binary.LittleEndian
	if string(h[0:8]) != journalRecMagic {
		return bad("magic")
	}
	if le.Uint32(h[jCRC:]) != crc32.Checksum(h[:jCRC], castagnoli) {
		return bad("header crc")
	}
	if !bytes.Equal(h[16:32], uuid[:]) {
		return bad("other volume")
	}
	if int64(le.Uint64(h[48:])) != selfOff {
		return bad("self offset")
	}
	r := &jrecord{seq: le.Uint64(h[8:]), epoch: le.Uint64(h[32:])}
	if r.seq == 0 {
		return bad("sequence 0")
	}
	stripe := le.Uint64(h[40:])
	if stripe >= uint64(g.Stripes()) {
		return bad("stripe out of range")
	}
	r.stripe = int64(stripe)
	lo, hi := le.Uint32(h[56:]), le.Uint32(h[60:])
	if lo >= hi || hi > uint32(g.ChunkSize) || lo%layout.BlockSize != 0 || hi%layout.BlockSize != 0 {
		return bad("range")
	}
	r.lo, r.hi = int(lo), int(hi)
	n := le.Uint32(h[64:])
	if n < 1 || n > uint32(min(g.M, journalMaxPos)) {
		return bad("position count")
	}
	prev := -1
	for i := 0; i < journalMaxPos; i++ {
		p := int(h[72+i])
		if i >= int(n) {
			if p != 0 {
				return bad("position padding")
			}
			continue
		}
		if p <= prev || p >= g.K {
			return bad("positions")
		}
		prev = p
		r.mask |= 1 << uint(p)
	}
	if !isZero(h[80:jCRC]) {
		return bad("reserved bytes")
	}
	span := r.hi - r.lo
	size := journalRecordSize(int(n), span)
	if len(buf) < size {
		return bad("payload beyond the journal area")
	}
	payload := buf[journalBlock:size]
	if le.Uint32(h[68:]) != crc32.Checksum(payload, castagnoli) {
		return bad("payload crc")
	}
	for i := 0; i < int(n); i++ {
		r.data = append(r.data, payload[i*span:(i+1)*span])
	}
	return r, size, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Journal header block (copies A and B at the start of the area).
func encodeJournalHeader(h []byte, uuid [16]byte, retired, gen uint64) {
	clear(h[:journalBlock])
	le := binary.LittleEndian
	copy(h[0:8], journalHdrMagic)
	copy(h[8:24], uuid[:])
	le.PutUint64(h[24:], retired)
	le.PutUint64(h[32:], gen)
	le.PutUint32(h[jCRC:], crc32.Checksum(h[:jCRC], castagnoli))
}

// parseJournalHeader returns the retired sequence number and generation of
// a valid header block.
func parseJournalHeader(h []byte, uuid [16]byte) (retired, gen uint64, ok bool) {
	if len(h) < journalBlock || string(h[0:8]) != journalHdrMagic {
		return 0, 0, false
	}
	le := binary.LittleEndian
	if le.Uint32(h[jCRC:]) != crc32.Checksum(h[:jCRC], castagnoli) || !bytes.Equal(h[8:24], uuid[:]) ||
		!isZero(h[40:jCRC]) {
		return 0, 0, false
	}
	return le.Uint64(h[24:]), le.Uint64(h[32:]), true
}

// journal is the running stripe journal of a volume.
type journal struct {
	v       *Volume
	hdrOff  int64 // first header copy; the second follows
	ringOff int64 // record area [ringOff, ringEnd) on every member
	ringEnd int64

	retireMu sync.Mutex  // serialises retire (member flush + header write)
	again    atomic.Bool // a retire was asked for while one ran
	// held: assembly has not finished replaying; nothing may be retired
	// (every record is unretired until the replay is durable).
	held atomic.Bool
	// afterRound, when set (tests), runs in retire after its last round,
	// before retireMu is released.
	afterRound func()

	mu       sync.Mutex // guards the fields below; never held during I/O
	cond     sync.Cond  // signalled when a logged write completes or records retire
	next     uint64     // next sequence number
	retired  uint64     // every record <= retired is no longer needed (durable on disk)
	gen      uint64     // header generation (copy gen%2 is written next)
	inflight map[uint64]struct{}
	rings    []jring // by slot

	bufs    sync.Pool // *[]byte of maxRecordSize bytes
	runBufs sync.Pool // *[]byte holding the records of one write run

	records  atomic.Int64 // records written since assembly
	bytes    atomic.Int64
	forced   atomic.Int64 // retires forced by a full ring
	replayed atomic.Int64 // records replayed at assembly
}

type jring struct {
	head int64
	live []jlive
}

type jlive struct {
	seq      uint64
	off, end int64
}

func newJournal(v *Volume, sb *superblock.Superblock) *journal {
	j := &journal{
		v: v, hdrOff: sb.JournalOffset, ringOff: sb.JournalOffset + journalHdrBlocks*journalBlock,
		ringEnd: sb.JournalOffset + sb.JournalBytes, next: 1,
		inflight: map[uint64]struct{}{}, rings: make([]jring, sb.Geometry.Members()),
	}
	j.cond.L = &j.mu
	n := maxRecordSize(sb.Geometry)
	j.bufs.New = func() any { b := AlignedBuffer(int(n)); return &b }
	return j
}

// maxRecordSize is the largest record a write of geometry g can produce:
// a full chunk of up to m positions.
func maxRecordSize(g layout.Geometry) int64 {
	return int64(journalRecordSize(g.M, g.ChunkSize))
}

// retirable returns the highest sequence number below which every logged
// write has completed. Callers hold mu.
func (j *journal) retirable() uint64 {
	rp := j.next - 1
	for s := range j.inflight {
		rp = min(rp, s-1)
	}
	return rp
}

// place finds room for a record of n bytes in ring rg without overwriting
// a record that is still needed. Callers hold mu.
func (j *journal) place(rg *jring, n int64) (int64, bool) {
	off := rg.head
	if off < j.ringOff || off+n > j.ringEnd {
		off = j.ringOff
	}
	for _, l := range rg.live {
		if l.seq > j.retired && off < l.end && l.off < off+n {
			return 0, false
		}
	}
	return off, true
}

// append logs the post-write contents of the data positions in mask of
// stripe r over [r.Lo, r.Hi) (shards[pos]) to the journal rings of slots
// with FUA writes. It returns the record's sequence number; the caller
// calls done with it once the stripe's data and parity writes completed.
// A member failing here is marked failed and errRetry is returned: nothing
// of the stripe has been written yet.
func (j *journal) append(r layout.StripeReq, mask uint64, shards [][]byte, slots []int, epoch uint64) (uint64, error) {
	rec, _, err := j.reserve(r, mask, slots, true)
	if err != nil {
		return 0, err
	}
	j.encode(rec, r, mask, shards, epoch)
	// The record alone must be durable before the stripe's writes: one
	// FUA write per copy, no flush of the member's other writes.
	j.v.exec.Execute(rec.ios)
	return rec.seq, j.written(rec)
}

// pendingRecord is a journal record between reserve and written: its
// place in the rings of slots, and the FUA writes that put it there.
type pendingRecord struct {
	seq   uint64
	size  int64
	slots []int
	offs  []int64
	bp    *[]byte // pooled buffer of the first copy
	ios   []IO
}

// reserve places a record for mask over r in the rings of slots and
// counts it in flight. With wait it retires records or waits for logged
// writes to make room; without, it reports ok false (nothing reserved)
// when the rings are full.
func (j *journal) reserve(r layout.StripeReq, mask uint64, slots []int, wait bool) (rec *pendingRecord, ok bool, err error) {
	if len(slots) == 0 {
		return nil, false, fmt.Errorf("journal: no writable member in group %d: %w", r.Group, ErrTooManyFailures)
	}
	size := int64(journalRecordSize(bitsCount(mask), r.Hi-r.Lo))
	if size > j.ringEnd-j.ringOff {
		return nil, false, fmt.Errorf("journal record of %d bytes exceeds the journal area", size)
	}
	offs := make([]int64, len(slots))
	j.mu.Lock()
	for !j.placeAll(slots, size, offs) {
		if !wait {
			j.mu.Unlock()
			return nil, false, nil
		}
		if j.retirable() > j.retired {
			j.mu.Unlock()
			j.forced.Add(1)
			err := j.retire()
			j.mu.Lock()
			if err != nil {
				j.mu.Unlock()
				return nil, false, fmt.Errorf("journal full: %w", err)
			}
			continue
		}
		if len(j.inflight) == 0 {
			j.mu.Unlock()
			return nil, false, fmt.Errorf("journal: no room for a record of %d bytes", size)
		}
		j.cond.Wait() // a logged write in flight will complete
	}
	seq := j.next
	j.next++
	j.inflight[seq] = struct{}{}
	for i, slot := range slots {
		rg := &j.rings[slot]
		rg.live = append(rg.live, jlive{seq: seq, off: offs[i], end: offs[i] + size})
		rg.head = offs[i] + size
	}
	j.mu.Unlock()
	return &pendingRecord{seq: seq, size: size, slots: slots, offs: offs}, true, nil
}

// placeAll finds room for size bytes in the ring of every slot (offs).
// Callers hold mu.
func (j *journal) placeAll(slots []int, size int64, offs []int64) bool {
	for i, slot := range slots {
		off, fit := j.place(&j.rings[slot], size)
		if !fit {
			return false
		}
		offs[i] = off
	}
	return true
}

// encode builds rec's FUA writes (rec.ios): header and payload in one
// pooled buffer per copy.
func (j *journal) encode(rec *pendingRecord, r layout.StripeReq, mask uint64, shards [][]byte, epoch uint64) {
	rec.bp = j.bufs.Get().(*[]byte)
	j.encodeInto(rec, r, mask, shards, epoch, (*rec.bp)[:rec.size])
}

// follows reports whether rec lies right after prev in the same member's
// ring (both with one copy).
func (rec *pendingRecord) follows(prev *pendingRecord) bool {
	return len(rec.slots) == 1 && len(prev.slots) == 1 && rec.slots[0] == prev.slots[0] &&
		rec.offs[0] == prev.offs[0]+prev.size
}

// runBuffer returns a pooled aligned buffer of at least n bytes for the
// records of one write run.
func (j *journal) runBuffer(n int64) *[]byte {
	bp, _ := j.runBufs.Get().(*[]byte)
	if bp == nil || int64(cap(*bp)) < n {
		b := AlignedBuffer(int(n))
		bp = &b
	}
	*bp = (*bp)[:n]
	return bp
}

// encodeInto builds rec's FUA writes (rec.ios) with the first copy in buf
// (rec.size bytes, owned by the caller); further copies get their own.
func (j *journal) encodeInto(rec *pendingRecord, r layout.StripeReq, mask uint64, shards [][]byte, epoch uint64, buf []byte) {
	span := r.Hi - r.Lo
	hdr := &jrecord{seq: rec.seq, epoch: epoch, stripe: r.Stripe, lo: r.Lo, hi: r.Hi, mask: mask}
	crc := uint32(0)
	for p := 0; p < j.v.geo.K; p++ {
		if mask&(1<<uint(p)) != 0 {
			crc = crc32.Update(crc, castagnoli, shards[p][:span])
		}
	}
	k := 0
	for p := 0; p < j.v.geo.K; p++ {
		if mask&(1<<uint(p)) != 0 {
			copy(buf[journalBlock+k*span:], shards[p][:span])
			k++
		}
	}
	rec.ios = rec.ios[:0]
	for i, slot := range rec.slots {
		b := buf
		if i > 0 {
			b = bytes.Clone(buf)
		}
		encodeRecordHeader(b, j.v.base.VolumeUUID, rec.offs[i], hdr, crc)
		rec.ios = append(rec.ios, IO{Dev: j.v.dev(slot), Write: true, FUA: true, Buf: b, Off: rec.offs[i]})
	}
}

// written ends rec's writes once they ran: a member that failed one is
// failed and the record dropped (errRetry: nothing of the stripe was
// written yet, the write is re-planned), else the record counts.
func (j *journal) written(rec *pendingRecord) error {
	if rec.bp != nil {
		j.bufs.Put(rec.bp)
		rec.bp = nil
	}
	for _, io := range rec.ios {
		if io.Err != nil {
			j.done(rec.seq)
			if err := j.v.failErrored(rec.ios, rec.slots, "journal write"); err != nil {
				return err
			}
			return errRetry
		}
	}
	j.records.Add(1)
	j.bytes.Add(rec.size * int64(len(rec.slots)))
	return nil
}

// done retires a logged write from the in-flight set.
func (j *journal) done(seq uint64) {
	j.mu.Lock()
	delete(j.inflight, seq)
	j.cond.Broadcast()
	j.mu.Unlock()
}

// retire flushes every member and then, when logged writes completed
// since the last retire, records durably that their records are no longer
// needed (the header's retired sequence number), so that their space can
// be reused and assembly never replays them. It is Volume.Flush while the
// volume has a journal.
//
// A retireSoon that finds retireMu held leaves its request in again and
// relies on the holder: the holder checks again after every round and,
// once more, after it released the lock (a request made between its last
// check and the unlock would otherwise be dropped).
func (j *journal) retire() error {
	j.retireMu.Lock()
	for {
		j.again.Store(false)
		if err := j.retireLocked(); err != nil {
			j.retireMu.Unlock()
			return err
		}
		if j.again.Load() {
			continue
		}
		if j.afterRound != nil {
			j.afterRound()
		}
		j.retireMu.Unlock()
		if !j.again.Load() || !j.retireMu.TryLock() {
			return nil // no request, or a new holder serves it
		}
	}
}

// retireSoon retires now, or, when a retire is running (possibly further
// up this goroutine's stack: a member failing during a retire), makes it
// run once more. While held (assembly before its journal replay
// finished), requests are dropped: the assembly resets the journal once
// the replay is durable.
func (j *journal) retireSoon() {
	if j.held.Load() {
		return
	}
	j.again.Store(true)
	if !j.retireMu.TryLock() {
		return
	}
	j.retireMu.Unlock()
	if err := j.retire(); err != nil {
		j.v.log.Error("journal retire after member failure", "err", err)
	}
}

// retireThrough returns once record seq (whose write completed) is
// retired: it retires, waiting for earlier logged writes still in flight.
func (j *journal) retireThrough(seq uint64) error {
	j.done(seq)
	for {
		if err := j.retire(); err != nil {
			return err
		}
		j.mu.Lock()
		if j.retired >= seq {
			j.mu.Unlock()
			return nil
		}
		if j.retirable() < seq {
			j.cond.Wait() // an earlier logged write is still in flight
		}
		j.mu.Unlock()
	}
}

func (j *journal) retireLocked() error {
	j.mu.Lock()
	rp := j.retirable() // before the flush: these writes completed before it
	need := rp > j.retired
	gen := j.gen
	if need {
		j.gen++
	}
	j.mu.Unlock()
	if err := j.v.flushMembers(); err != nil {
		return err
	}
	if !need {
		return nil
	}
	if err := j.writeHeader(rp, gen, nil); err != nil {
		return err
	}
	j.mu.Lock()
	j.retired = rp
	for i := range j.rings {
		rg := &j.rings[i]
		rg.live = slices.DeleteFunc(rg.live, func(l jlive) bool { return l.seq <= rp })
	}
	j.cond.Broadcast()
	j.mu.Unlock()
	return nil
}

// writeHeader writes header copy gen%2 with the retired sequence number
// durably: to every writable member as FUA writes in one round, or only to
// dev (write and flush).
func (j *journal) writeHeader(retired, gen uint64, dev Member) error {
	h := AlignedBuffer(journalBlock)
	encodeJournalHeader(h, j.v.base.VolumeUUID, retired, gen)
	off := j.hdrOff + int64(gen%journalHdrBlocks)*journalBlock
	if dev != nil {
		if err := j.v.memberWrite(dev, h, off); err != nil {
			return err
		}
		return j.v.memberFlush(dev)
	}
	return j.v.writeWritableFUA("journal header write", nil, h, off)
}

// reset makes every record so far unneeded: both header copies get the
// highest sequence number used, on every writable member. Used at
// creation and after assembly replayed the journal and flushed.
func (j *journal) reset() error {
	j.mu.Lock()
	rp := j.next - 1
	g0 := j.gen
	j.gen += 2
	j.mu.Unlock()
	for i := uint64(0); i < journalHdrBlocks; i++ {
		if err := j.writeHeader(rp, g0+i, nil); err != nil {
			return err
		}
	}
	j.mu.Lock()
	j.retired = rp
	for i := range j.rings {
		j.rings[i] = jring{}
	}
	j.mu.Unlock()
	return nil
}

// install prepares slot for a new or returning device: its ring starts
// empty and it gets the current header (both copies).
func (j *journal) install(slot int, dev Member) error {
	j.mu.Lock()
	rp, gen := j.retired, j.gen
	j.rings[slot] = jring{}
	j.mu.Unlock()
	for i := uint64(0); i < journalHdrBlocks; i++ {
		if err := j.writeHeader(rp, gen+i, dev); err != nil {
			return err
		}
	}
	return nil
}

// journalScan is what assembly found in the members' journal areas.
type journalScan struct {
	headers bool      // some member has a valid header
	retired uint64    // highest retired sequence number of any valid header
	gen     uint64    // highest header generation
	maxSeq  uint64    // highest sequence number of any valid record
	records []jrecord // valid records with seq > retired, by seq, deduplicated
}

// scanJournal reads the journal area of every device in devs.
func scanJournal(devs []Member, sb *superblock.Superblock) (*journalScan, error) {
	s := &journalScan{}
	area := make([]byte, sb.JournalBytes)
	bySeq := map[uint64]jrecord{}
	for _, d := range devs {
		if d == nil {
			continue
		}
		if _, err := d.ReadAt(area, sb.JournalOffset); err != nil {
			continue // an unreadable journal is like a missing member
		}
		for i := 0; i < journalHdrBlocks; i++ {
			if rp, gen, ok := parseJournalHeader(area[i*journalBlock:], sb.VolumeUUID); ok {
				s.headers = true
				s.retired = max(s.retired, rp)
				s.gen = max(s.gen, gen)
			}
		}
		for off := journalHdrBlocks * journalBlock; off+journalBlock <= len(area); off += journalBlock {
			r, size, err := parseRecord(area[off:], sb.JournalOffset+int64(off), sb.VolumeUUID, sb.Geometry)
			if err != nil {
				continue
			}
			s.maxSeq = max(s.maxSeq, r.seq)
			if _, dup := bySeq[r.seq]; !dup {
				c := *r
				c.data = nil
				for _, b := range r.data {
					c.data = append(c.data, bytes.Clone(b))
				}
				bySeq[r.seq] = c
			}
			off += size - journalBlock
		}
	}
	for seq, r := range bySeq {
		if seq > s.retired {
			s.records = append(s.records, r)
		}
	}
	slices.SortFunc(s.records, func(a, b jrecord) int {
		if a.seq < b.seq {
			return -1
		}
		return 1
	})
	return s, nil
}

// replayJournal recomputes, in sequence order, the parity of every logged
// stripe in a dirty region from the readable data and the logged
// contents of the positions that cannot be read. A stripe that cannot be
// read without a position the record does not hold is marked in holes.
func (v *Volume) replayJournal(recs []jrecord, dirty bitset, holes map[int64]bool) error {
	g := v.geo
	op := v.newOp()
	defer v.putOp(op)
	for i := range recs {
		rec := &recs[i]
		grp, row := g.Locate(rec.stripe)
		if !dirty.test(row / v.bm.regionRows) {
			continue
		}
		done := false
		for attempt := 0; attempt <= g.Width() && !done; attempt++ {
			if err := v.stopErr(); err != nil {
				return err
			}
			unreadable, unwritable := v.masks(grp, row)
			missing := unreadable & g.DataMask()
			if missing == 0 {
				break // resync recomputes parity from the data
			}
			if missing&^rec.mask != 0 {
				holes[rec.stripe] = true
				break
			}
			n := rec.hi - rec.lo
			mo := g.MemberOffset(row) + int64(rec.lo)
			for pos := 0; pos < g.K; pos++ {
				bit := uint64(1) << uint(pos)
				switch {
				case missing&bit != 0:
					op.shards[pos] = rec.data[bitsCount(rec.mask&(bit-1))]
				default:
					op.shards[pos] = op.buf(n)
					op.add(g.Slot(grp, g.MemberOf(row, pos)), false, op.shards[pos], mo)
				}
			}
			if !op.run() {
				op.release()
				continue
			}
			for pos := g.K; pos < g.Width(); pos++ {
				op.shards[pos] = op.buf(n)
			}
			if err := v.enc.Encode(op.shards); err != nil {
				op.release()
				return fmt.Errorf("journal replay stripe %d: %w", rec.stripe, err)
			}
			for pos := g.K; pos < g.Width(); pos++ {
				if unwritable&(1<<uint(pos)) == 0 {
					op.add(g.Slot(grp, g.MemberOf(row, pos)), true, op.shards[pos], mo)
				}
			}
			op.run()
			op.release()
			v.jrn.replayed.Add(1)
			done = true
		}
	}
	return nil
}

// Owner-domain journaling (docs/engine.md, "Owner-domain journaling"): the
// members in the owner's failure domain die with the owner, so a write torn
// by that death would leave parity from which their chunks reconstruct
// wrongly. Every write to a stripe with a data chunk on one of them logs
// that chunk's post-write contents (over the write's range) to a member of
// another domain first, in the same record as the degraded positions.

// markOwnerSlots marks the slots covered by owner-domain journaling: the
// members of domain on a version 3 volume with a journal, in groups where
// the domain holds at most m members (a group with more dies with the
// owner whatever is logged).
func (v *Volume) markOwnerSlots(sb *superblock.Superblock, domain string) {
	if domain == "" {
		return
	}
	if v.jrn == nil || sb.Version < superblock.Version {
		v.log.Warn("owner-domain journaling needs a format version 3 volume with a stripe journal; off",
			"owner_domain", domain, "version", sb.Version, "journal", v.jrn != nil)
		return
	}
	g := v.geo
	marked := 0
	for grp := 0; grp < g.Groups; grp++ {
		var in []int
		for mem := 0; mem < g.Width(); mem++ {
			if slot := g.Slot(grp, mem); sb.Members[slot].Domain == domain {
				in = append(in, slot)
			}
		}
		if len(in) > g.M {
			v.log.Warn("owner-domain journaling off for a group: the owner's domain holds more than m members",
				"group", grp, "owner_domain", domain, "members", len(in), "m", g.M)
			continue
		}
		for _, slot := range in {
			v.slots[slot].owner = true
			marked++
		}
	}
	v.ownerSlots = marked
}

// ownerJournal returns the data positions of a write's stripe that
// owner-domain journaling logs in addition to journal (the positions not
// durably readable), and the positions a record must avoid. owner is the
// stripe's positions on the owner's members, lost those not durably in
// sync or not writable. When losing the owner's members would leave the
// stripe with more than m lost chunks, nothing is added: the group would be
// lost with the owner anyway.
func (v *Volume) ownerJournal(owner, lost, journal uint64) (extra, avoid uint64) {
	if owner == 0 || bitsCount(owner|lost) > v.geo.M {
		return 0, lost
	}
	return owner & v.geo.DataMask() &^ journal, lost | owner
}

// recordOwnerJournal records the owner's members as journal-covered
// (superblock member flag OwnerJournal) once every stripe is consistent:
// from then on every write to their data chunks is journaled, so an
// assembly that lacks them may take their rows as covered. Until then an
// assembly after a crash counts their dirty stripes as write holes.
func (v *Volume) recordOwnerJournal() error {
	if v.ownerSlots == 0 {
		return nil
	}
	// What made every stripe consistent is durable before the flag that
	// says so can be.
	if err := v.flushMembers(); err != nil {
		return fmt.Errorf("record owner-domain journaling: %w", err)
	}
	v.metaMu.Lock()
	defer v.unlockMeta()
	changed := false
	for slot := range v.slots {
		if m := &v.meta.Members[slot]; v.slots[slot].owner && !m.OwnerJournal {
			m.OwnerJournal, changed = true, true
		}
	}
	if !changed {
		return nil
	}
	if err := v.writeMetaLocked(); err != nil {
		return fmt.Errorf("record owner-domain journaling: %w", err)
	}
	return nil
}
