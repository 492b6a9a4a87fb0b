package drive

import (
	"bytes"
	"encoding/binary"
	"io"
)

// Signature is one on-disk format found on a device.
type Signature struct {
	Type   string // "ext4", "xfs", "md", "gpt", "mbr", "fabraid", ...
	Offset int64  // byte offset of the magic
	Detail string // e.g. "md 1.2"
}

// ScanBytes is how much of each end of a device Detect reads.
const ScanBytes = 1 << 20

const mdMagic = 0xa92b4efc

// Detect reports the signatures on a device of size bytes readable through r.
// It reads at most the first and last ScanBytes. Short reads are treated as
// zeroes: Detect never fails, it only finds less.
func Detect(r io.ReaderAt, size int64) []Signature {
	if size <= 0 {
		return nil
	}
	headLen := min(size, ScanBytes)
	head := make([]byte, headLen)
	n, _ := r.ReadAt(head, 0)
	clear(head[max(n, 0):])
	tailOff := max(size-ScanBytes, 0)
	tail := make([]byte, size-tailOff)
	n, _ = r.ReadAt(tail, tailOff)
	clear(tail[max(n, 0):])
	// at returns the len bytes at absolute offset off, if read.
	at := func(off int64, l int) []byte {
		if off >= 0 && off+int64(l) <= headLen {
			return head[off : off+int64(l)]
		}
		if off >= tailOff && off+int64(l) <= size {
			return tail[off-tailOff : off-tailOff+int64(l)]
		}
		return nil
	}
	has := func(off int64, magic string) bool {
		b := at(off, len(magic))
		return b != nil && string(b) == magic
	}
	le32 := func(off int64) (uint32, bool) {
		b := at(off, 4)
		if b == nil {
			return 0, false
		}
		return binary.LittleEndian.Uint32(b), true
	}

	var out []Signature
	add := func(typ string, off int64, detail string) {
		out = append(out, Signature{Type: typ, Offset: off, Detail: detail})
	}

	// ext2/3/4: superblock at 1024, s_magic 0xEF53 at +56; s_feature_incompat
	// at +96 (EXTENTS 0x40, FLEX_BG 0x200, 64BIT 0x80 mean ext4), compat at
	// +92 (HAS_JOURNAL 0x4 means ext3).
	if b := at(1024+56, 2); b != nil && binary.LittleEndian.Uint16(b) == 0xEF53 {
		incompat, _ := le32(1024 + 96)
		compat, _ := le32(1024 + 92)
		switch {
		case incompat&(0x40|0x80|0x200) != 0:
			add("ext4", 1080, "")
		case compat&0x4 != 0:
			add("ext3", 1080, "")
		default:
			add("ext2", 1080, "")
		}
	}
	if has(0, "XFSB") {
		add("xfs", 0, "")
	}
	if has(65536+64, "_BHRfS_M") {
		add("btrfs", 65536+64, "")
	}
	for _, ps := range []int64{4096, 8192, 16384, 65536} {
		if has(ps-10, "SWAPSPACE2") || has(ps-10, "SWAP-SPACE") {
			add("swap", ps-10, "")
			break
		}
	}
	if has(0, "LUKS\xba\xbe") || has(0, "SKUL\xba\xbe") {
		add("luks", 0, "")
	}
	for s := int64(0); s < 4; s++ {
		if has(s*512, "LABELONE") && has(s*512+24, "LVM2 001") {
			add("lvm2", s*512, "")
			break
		}
	}
	// md RAID (drivers/md/md.h, md_p.h): 1.1 at 0, 1.2 at 4 KiB, 1.0 at
	// (size - 8 KiB) rounded down to 4 KiB, 0.90 at size rounded down to
	// 64 KiB minus 64 KiB.
	mdAt := func(off int64, detail string) {
		if v, ok := le32(off); ok && v == mdMagic {
			add("md", off, detail)
		}
	}
	mdAt(0, "md 1.1")
	mdAt(4096, "md 1.2")
	if size >= 8192 {
		mdAt((size-8192)&^4095, "md 1.0")
	}
	if size >= 65536 {
		mdAt((size&^65535)-65536, "md 0.90")
	}
	// GPT header "EFI PART" in LBA 1: at 512 or 4096 bytes.
	gpt := false
	for _, off := range []int64{512, 4096} {
		if has(off, "EFI PART") {
			add("gpt", off, "")
			gpt = true
			break
		}
	}
	// MBR: 0x55AA at 510 and a partition entry with a type byte; a GPT's
	// protective MBR is reported as GPT only. A boot sector of a filesystem
	// (FAT, NTFS) also ends in 0x55AA: reported as mbr too, which refuses it.
	if !gpt && has(510, "\x55\xaa") {
		if b := at(446, 64); b != nil && !bytes.Equal(b, make([]byte, 64)) {
			add("mbr", 510, "")
		} else if has(3, "NTFS    ") || has(82, "FAT32   ") || has(54, "FAT1") {
			add("mbr", 510, "filesystem boot sector")
		}
	}
	// fabraid member superblock, copy A or B (engine/superblock).
	for _, off := range []int64{4096, 12288} {
		if has(off, "FABRAIDv") {
			add("fabraid", off, "")
			break
		}
	}
	return out
}
