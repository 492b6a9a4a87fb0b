package engine

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

var fuzzJournalGeo = layout.Geometry{K: 4, M: 2, Groups: 2, ChunkSize: 16384, Rows: 64}

var fuzzJournalUUID = [16]byte{0xfa, 0xb, 0x4a, 0x1d}

// encodeTestRecord returns a whole record (header and payload) written at
// member offset at.
func encodeTestRecord(r *jrecord, at int64) []byte {
	span := r.hi - r.lo
	buf := make([]byte, journalRecordSize(len(r.data), span))
	crc := uint32(0)
	for i, d := range r.data {
		copy(buf[journalBlock+i*span:], d)
		crc = crc32.Update(crc, castagnoli, d)
	}
	encodeRecordHeader(buf, fuzzJournalUUID, at, r, crc)
	return buf
}

func sampleRecord(fill byte) *jrecord {
	a := bytes.Repeat([]byte{fill}, 8192)
	b := bytes.Repeat([]byte{fill ^ 0x5a}, 8192)
	return &jrecord{seq: 42, epoch: 3, stripe: 77, lo: 4096, hi: 12288, mask: 1<<1 | 1<<3, data: [][]byte{a, b}}
}

// FuzzJournalRecord feeds the journal record parser (a) arbitrary bytes,
// and a valid record with fuzzed bytes patched in (optionally re-sealed
// with valid CRCs, as a buggy writer would), and (b) a valid record
// damaged the way a crash or a bad disk would: torn at a block boundary
// (the tail holding other bytes or zeroes) or one byte changed. A record
// is accepted only if it is exactly what the encoder writes for its
// decoded fields (so a torn or garbage record is never replayed), and a
// damaged record is never accepted as the original.
func FuzzJournalRecord(f *testing.F) {
	f.Add([]byte{}, uint16(0), byte(0), byte(0))
	f.Add([]byte{64, 0, 7}, uint16(2), byte(0x10), byte(0))        // count changed, re-sealed
	f.Add([]byte{40, 0, 0xff}, uint16(40), byte(0x10), byte(0x80)) // stripe changed, re-sealed
	f.Add([]byte{72, 0, 3, 73, 0, 1}, uint16(70), byte(0x12), byte(9))
	f.Add([]byte(journalRecMagic), uint16(1), byte(1), byte(0))
	f.Fuzz(func(t *testing.T, patch []byte, where uint16, mode, val byte) {
		if len(patch) > 512 {
			patch = patch[:512]
		}
		// (a) arbitrary bytes, and a patched valid record.
		checkParsed(t, patch, 65536)
		orig := sampleRecord(val | 1)
		rec := encodeTestRecord(orig, 65536)
		buf := bytes.Clone(rec)
		for i := 0; i+2 < len(patch); i += 3 {
			buf[(int(patch[i])|int(patch[i+1])<<8)%len(buf)] = patch[i+2]
		}
		if mode&0x10 != 0 {
			binary.LittleEndian.PutUint32(buf[68:], crc32.Checksum(buf[journalBlock:], castagnoli))
			binary.LittleEndian.PutUint32(buf[jCRC:], crc32.Checksum(buf[:jCRC], castagnoli))
		}
		checkParsed(t, buf, 65536)
		_, _, err1 := parseRecord(buf, 65536, fuzzJournalUUID, fuzzJournalGeo)
		_, _, err2 := parseRecord(buf, 65536+journalBlock, fuzzJournalUUID, fuzzJournalGeo)
		if err1 == nil && err2 == nil {
			t.Fatal("record accepted at two offsets")
		}

		// (b) damage a valid record.
		dmg := bytes.Clone(rec)
		blk := int(where) % (len(dmg) / journalBlock)
		switch mode % 3 {
		case 0: // torn: blocks from a boundary on hold other bytes
			for i := blk * journalBlock; i < len(dmg); i++ {
				dmg[i] = 0
				if len(patch) > 0 {
					dmg[i] = patch[i%len(patch)]
				}
			}
		case 1: // torn: the tail never written (zeroes)
			clear(dmg[blk*journalBlock:])
		case 2: // one byte changed
			dmg[int(where)%len(dmg)] ^= val | 1
		}
		r, _, err := parseRecord(dmg, 65536, fuzzJournalUUID, fuzzJournalGeo)
		if bytes.Equal(dmg, rec) {
			if err != nil {
				t.Fatalf("undamaged record rejected: %v", err)
			}
			return
		}
		if err == nil {
			t.Fatalf("damaged record (mode %d at %d) accepted: seq %d", mode%3, where, r.seq)
		}
	})
}

// checkParsed parses buf and, when it is accepted, checks that every field
// is in range and that re-encoding gives back the same bytes.
func checkParsed(t *testing.T, buf []byte, at int64) {
	t.Helper()
	r, size, err := parseRecord(buf, at, fuzzJournalUUID, fuzzJournalGeo)
	if err != nil {
		return
	}
	g := fuzzJournalGeo
	if r.seq == 0 || r.stripe < 0 || r.stripe >= g.Stripes() || r.lo < 0 || r.hi > g.ChunkSize || r.lo >= r.hi ||
		r.mask == 0 || r.mask>>uint(g.K) != 0 || len(r.data) != bitsCount(r.mask) || bitsCount(r.mask) > g.M {
		t.Fatalf("accepted record out of range: %+v", r)
	}
	for _, d := range r.data {
		if len(d) != r.hi-r.lo {
			t.Fatalf("payload of %d bytes for range %d..%d", len(d), r.lo, r.hi)
		}
	}
	if size > len(buf) || size != journalRecordSize(len(r.data), r.hi-r.lo) {
		t.Fatalf("size %d of %d", size, len(buf))
	}
	if again := encodeTestRecord(r, at); !bytes.Equal(again, buf[:size]) {
		t.Fatal("accepted record does not re-encode to the same bytes")
	}
}

// FuzzJournalScan: the members' journal areas hold valid records among
// garbage, torn and retired ones; the scan returns exactly the valid,
// unretired records, each once, in sequence order.
func FuzzJournalScan(f *testing.F) {
	f.Add([]byte{1, 2, 3}, uint8(0))
	f.Add([]byte{0xff, 0, 0x10}, uint8(5))
	f.Fuzz(func(t *testing.T, ops []byte, retired uint8) {
		sb := fuzzSuperblock()
		area := make([]byte, sb.JournalBytes)
		hdr := make([]byte, journalBlock)
		encodeJournalHeader(hdr, sb.VolumeUUID, uint64(retired), 1)
		copy(area[journalBlock:], hdr)
		want := map[uint64]bool{}
		off := journalHdrBlocks * journalBlock
		for i, op := range ops {
			if i > 16 {
				break
			}
			r := sampleRecord(op)
			r.seq = uint64(op) + 1
			r.data = r.data[:1+int(op)%2]
			r.mask = 1 << uint(op%4)
			if len(r.data) == 2 {
				r.mask |= 1 << uint(op%4^1)
			}
			r.data[0] = r.data[0][:8192]
			rec := encodeTestRecord(r, sb.JournalOffset+int64(off))
			if off+len(rec) > len(area) {
				break
			}
			copy(area[off:], rec)
			switch op >> 6 {
			case 0, 1: // intact
				if r.seq > uint64(retired) {
					want[r.seq] = true
				}
			case 2: // torn: last block never written
				clear(area[off+len(rec)-journalBlock : off+len(rec)])
			case 3: // garbage after the header
				area[off+journalBlock+int(op)] ^= 0xff
			}
			off += len(rec)
		}
		dev := NewMemMember(sb.JournalOffset + sb.JournalBytes)
		dev.Corrupt(sb.JournalOffset, area)
		js, err := scanJournal([]Member{dev, nil}, sb)
		if err != nil {
			t.Fatal(err)
		}
		if !js.headers || js.retired != uint64(retired) {
			t.Fatalf("header: %v retired %d", js.headers, js.retired)
		}
		got := map[uint64]bool{}
		var prev uint64
		for _, r := range js.records {
			if !want[r.seq] || got[r.seq] || r.seq <= prev {
				t.Fatalf("record %d returned (want %v, order %d after %d)", r.seq, want, r.seq, prev)
			}
			got[r.seq], prev = true, r.seq
		}
		if len(got) != len(want) {
			t.Fatalf("records %v, want %v", got, want)
		}
	})
}

func fuzzSuperblock() *superblock.Superblock {
	return &superblock.Superblock{VolumeUUID: fuzzJournalUUID, Geometry: fuzzJournalGeo,
		JournalOffset: 36864, JournalBytes: 256 << 10}
}
