package drive

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func put(b []byte, off int64, s string) { copy(b[off:], s) }

func TestDetect(t *testing.T) {
	const size = 8 << 20
	le32 := func(b []byte, off int64, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
	for _, tc := range []struct {
		name  string
		write func(b []byte)
		want  []string // type/offset
	}{
		{"blank", func(b []byte) {}, nil},
		{"ext4", func(b []byte) { put(b, 1080, "\x53\xef"); le32(b, 1024+96, 0x2c2) }, []string{"ext4@1080"}},
		{"ext3", func(b []byte) { put(b, 1080, "\x53\xef"); le32(b, 1024+92, 0x4) }, []string{"ext3@1080"}},
		{"ext2", func(b []byte) { put(b, 1080, "\x53\xef") }, []string{"ext2@1080"}},
		{"xfs", func(b []byte) { put(b, 0, "XFSB") }, []string{"xfs@0"}},
		{"btrfs", func(b []byte) { put(b, 65600, "_BHRfS_M") }, []string{"btrfs@65600"}},
		{"swap", func(b []byte) { put(b, 4086, "SWAPSPACE2") }, []string{"swap@4086"}},
		{"luks", func(b []byte) { put(b, 0, "LUKS\xba\xbe") }, []string{"luks@0"}},
		{"lvm2", func(b []byte) { put(b, 512, "LABELONE"); put(b, 536, "LVM2 001") }, []string{"lvm2@512"}},
		{"md1.2", func(b []byte) { le32(b, 4096, mdMagic) }, []string{"md@4096"}},
		{"md1.1", func(b []byte) { le32(b, 0, mdMagic) }, []string{"md@0"}},
		{"md1.0", func(b []byte) { le32(b, size-8192, mdMagic) }, []string{"md@8380416"}},
		{"md0.90", func(b []byte) { le32(b, size-65536, mdMagic) }, []string{"md@8323072"}},
		{"gpt", func(b []byte) { put(b, 510, "\x55\xaa"); b[450] = 0xee; put(b, 512, "EFI PART") }, []string{"gpt@512"}},
		{"gpt4k", func(b []byte) { put(b, 4096, "EFI PART") }, []string{"gpt@4096"}},
		{"mbr", func(b []byte) { put(b, 510, "\x55\xaa"); b[450] = 0x83 }, []string{"mbr@510"}},
		{"mbr-empty-table", func(b []byte) { put(b, 510, "\x55\xaa") }, nil},
		{"fat32", func(b []byte) { put(b, 510, "\x55\xaa"); put(b, 82, "FAT32   ") }, []string{"mbr@510"}},
		{"fabraid", func(b []byte) { put(b, 4096, "FABRAIDv") }, []string{"fabraid@4096"}},
		{"fabraid-copyB", func(b []byte) { put(b, 12288, "FABRAIDv") }, []string{"fabraid@12288"}},
		{"ext4+md", func(b []byte) { put(b, 1080, "\x53\xef"); le32(b, 1024+96, 0x40); le32(b, 4096, mdMagic) }, []string{"ext4@1080", "md@4096"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, size)
			tc.write(b)
			var got []string
			for _, s := range Detect(bytes.NewReader(b), size) {
				got = append(got, s.Type+"@"+itoa(s.Offset))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// TestDetectSmall: devices smaller than the scanned areas, and size 0.
func TestDetectSmall(t *testing.T) {
	for _, size := range []int64{0, 1, 511, 4096, 70000} {
		b := make([]byte, size)
		if size > 4 {
			copy(b, "XFSB")
		}
		got := Detect(bytes.NewReader(b), size)
		if size > 4 && (len(got) != 1 || got[0].Type != "xfs") {
			t.Errorf("size %d: %v", size, got)
		}
		if size <= 4 && len(got) != 0 {
			t.Errorf("size %d: %v", size, got)
		}
	}
}

func FuzzDetect(f *testing.F) {
	f.Add([]byte("XFSB"), int64(0))
	f.Add(make([]byte, 5000), int64(3))
	f.Fuzz(func(t *testing.T, b []byte, extra int64) {
		// A reader shorter than the claimed size (short reads) must not panic.
		size := int64(len(b)) + extra%(4<<20)
		for _, s := range Detect(bytes.NewReader(b), size) {
			if s.Offset < 0 || s.Offset >= size || s.Type == "" {
				t.Fatalf("bad signature %+v for size %d", s, size)
			}
		}
	})
}
