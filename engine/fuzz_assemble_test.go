package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/fabraid/fabraid/engine/superblock"
)

// FuzzAssemble damages the metadata of a written 3+2 volume on real member
// bytes (torn copies, flipped fields, fields changed and re-sealed with a
// valid CRC as a buggy writer would, whole members missing) and assembles
// it. Whatever happens, assembly must not panic, and a volume that does
// assemble must return exactly the data written or an error, never other
// data.
func FuzzAssemble(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 10, 0, 1})
	f.Add([]byte{0x81, 160, 0, 9, 0x82, 160, 0, 9})            // bump events on two members (re-sealed)
	f.Add([]byte{0x80, 48 + 0, 1, 2, 0x83, 180 & 0xff, 0, 4})  // role / slot changes
	f.Add([]byte{0x10, 0, 0, 0, 0x30, 0, 0, 0, 0x40, 0, 0, 0}) // members missing
	f.Add([]byte{0x84, 96, 0, 3, 0x04, 0x20, 0x10, 0xff})      // geometry change + torn copy
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		const size = 512 << 10
		g := 5
		mm, devs := memMembers(g, size)
		v, err := Create(Config{Name: "fz", K: 3, M: 2, ChunkSize: 4096, DataOffset: 64 << 10, RegionSize: 16 << 10,
			AssumeZeroed: true}, devs, nil, Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, v.Size())
		for i := range data {
			data[i] = byte(i*7 + i>>12)
		}
		if _, err := v.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		present := []bool{true, true, true, true, true}
		// Valid re-sealed rewrites are limited to two members (m): three
		// consistent, valid rewrites of every copy would describe another
		// volume, which no check can tell from ours.
		resealed := map[int]bool{}
		for i := 0; i+3 < len(ops); i += 4 {
			op, a, b, c := ops[i], ops[i+1], ops[i+2], ops[i+3]
			m := int(op&0x0f) % g
			switch {
			case op&0xf0 == 0x80: // change a field of both copies and re-seal
				if !resealed[m] && len(resealed) == 2 {
					continue
				}
				resealed[m] = true
				for _, base := range []int64{superblock.CopyAOffset, superblock.CopyBOffset} {
					buf := make([]byte, superblock.CopySize)
					mm[m].ReadAt(buf, base)
					off := int(a) | int(b&0x1f)<<8
					if off >= superblock.CopySize-4 {
						off = int(a)
					}
					buf[off] = c
					binary.LittleEndian.PutUint32(buf[superblock.CopySize-4:], crc32.Checksum(buf[:superblock.CopySize-4], castagnoli))
					mm[m].Corrupt(base, buf)
				}
			case op&0xf0 == 0x00: // flip a byte without re-sealing (torn or rotten copy)
				off := superblock.CopyAOffset + int64(int(a)|int(b)<<8)%(2*superblock.CopySize)
				mm[m].Corrupt(off, []byte{c})
			default: // member missing
				present[m] = false
			}
		}
		var use []Member
		for i, m := range mm {
			m.Reopen()
			if present[i] {
				use = append(use, m)
			}
		}
		v, err = Assemble(use, nil, Options{Logger: quietLogger()})
		if err != nil {
			if !errors.Is(err, ErrAssembly) && !errors.Is(err, superblock.ErrInvalid) {
				t.Logf("assembly error not wrapping ErrAssembly: %v", err)
			}
			return
		}
		defer v.Abandon() // stops the background resync
		if v.Size() != int64(len(data)) {
			t.Fatalf("assembled a volume of %d bytes, wrote %d", v.Size(), len(data))
		}
		got := make([]byte, len(data))
		if _, err := v.ReadAt(got, 0); err != nil {
			return
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("assembled volume returns wrong data (first diff at %d)", firstDiff(got, data))
		}
	})
}
