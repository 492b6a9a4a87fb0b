package ublk

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
)

func TestDecodeDesc(t *testing.T) {
	const devSize, bufSize = 1 << 30, 512 << 10
	tests := []struct {
		name string
		d    ublksys.IODesc
		want request
		err  error
	}{
		{"read", ublksys.IODesc{OpFlags: opRead, NrSectors: 8, StartSector: 16}, request{op: opRead, off: 8192, len: 4096}, nil},
		{"fua write", ublksys.IODesc{OpFlags: opWrite | ublksys.UBLK_IO_F_FUA, NrSectors: 1024, StartSector: 0}, request{op: opWrite, flags: ublksys.UBLK_IO_F_FUA, len: 512 << 10}, nil},
		{"flush", ublksys.IODesc{OpFlags: opFlush}, request{op: opFlush}, nil},
		{"flush at sector -1", ublksys.IODesc{OpFlags: opFlush, StartSector: ^uint64(0)}, request{op: opFlush}, nil},
		{"discard larger than a buffer", ublksys.IODesc{OpFlags: opDiscard, NrSectors: 1 << 20}, request{op: opDiscard, len: 512 << 20}, nil},
		{"last block", ublksys.IODesc{OpFlags: opRead, NrSectors: 8, StartSector: devSize/512 - 8}, request{op: opRead, off: devSize - 4096, len: 4096}, nil},
		{"past the end", ublksys.IODesc{OpFlags: opRead, NrSectors: 8, StartSector: devSize/512 - 7}, request{}, errBadRange},
		{"larger than the buffer", ublksys.IODesc{OpFlags: opWrite, NrSectors: 1025}, request{}, errBadRange},
		{"empty read", ublksys.IODesc{OpFlags: opRead}, request{}, errBadRange},
		{"huge sector", ublksys.IODesc{OpFlags: opRead, NrSectors: 8, StartSector: 1 << 63}, request{}, errBadRange},
		{"zone op", ublksys.IODesc{OpFlags: ublksys.UBLK_IO_OP_REPORT_ZONES, NrSectors: 1}, request{}, errUnsupportedOp},
		{"write same", ublksys.IODesc{OpFlags: ublksys.UBLK_IO_OP_WRITE_SAME, NrSectors: 1}, request{}, errUnsupportedOp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeDesc(tt.d, devSize, bufSize)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if err == nil && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzDecodeDesc: whatever the descriptor, a decoded request lies inside
// the device and (for data) inside one buffer, and decoding is the inverse
// of encoding.
func FuzzDecodeDesc(f *testing.F) {
	f.Add(uint32(opRead), uint32(8), uint64(0))
	f.Add(uint32(opWrite|ublksys.UBLK_IO_F_FUA), uint32(1024), uint64(2048))
	f.Add(uint32(opDiscard), uint32(1<<31), uint64(1<<40))
	f.Add(uint32(opFlush), uint32(0), uint64(0))
	f.Add(uint32(0xff), uint32(1), uint64(1<<62))
	f.Fuzz(func(t *testing.T, opFlags, nr uint32, start uint64) {
		const devSize, bufSize = 64 << 20, 256 << 10
		d := ublksys.IODesc{OpFlags: opFlags, NrSectors: nr, StartSector: start}
		r, err := decodeDesc(d, devSize, bufSize)
		if err != nil {
			if !errors.Is(err, errBadRange) && !errors.Is(err, errUnsupportedOp) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if r.off < 0 || r.len < 0 || r.off%512 != 0 || r.len%512 != 0 {
			t.Fatalf("bad request %+v", r)
		}
		if r.op == opFlush && (r.off != 0 || r.len != 0) {
			t.Fatalf("flush with a range: %+v", r)
		}
		if r.off+r.len > devSize {
			t.Fatalf("request %+v beyond the device", r)
		}
		if (r.op == opRead || r.op == opWrite) && (r.len == 0 || r.len > bufSize) {
			t.Fatalf("data request %+v does not fit a buffer", r)
		}
		if r.op != opFlush {
			if got := encodeDesc(r); got != d {
				t.Fatalf("encode(decode(%+v)) = %+v", d, got)
			}
		}
		if r.op == opFlush {
			return
		}
		r2, err := decodeDesc(encodeDesc(r), devSize, bufSize)
		if err != nil || r2 != r {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", r, r2, err)
		}
	})
}

func TestFeatures(t *testing.T) {
	f := Features(0x1fe)
	if got, want := f.String(), "URING_CMD_COMP_IN_TASK|NEED_GET_DATA|USER_RECOVERY|USER_RECOVERY_REISSUE|UNPRIVILEGED_DEV|CMD_IOCTL_ENCODE|USER_COPY|ZONED"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (FeatureUserCopy | 1<<40).String(); got != "USER_COPY|0x10000000000" {
		t.Errorf("unknown bit: %q", got)
	}
	if got := Features(0).String(); got != "0" {
		t.Errorf("empty: %q", got)
	}
	if err := missingError(FeatureUserRecovery|FeatureUserCopy, FeatureUserRecovery); !errors.Is(err, ErrNotSupported) ||
		!strings.Contains(err.Error(), "USER_COPY") || !strings.Contains(err.Error(), "requires Linux >= 6.5") {
		t.Errorf("missingError: %v", err)
	}
	if err := missingError(FeatureUserRecovery, f); err != nil {
		t.Errorf("missingError with the feature present: %v", err)
	}
}

func TestParams(t *testing.T) {
	c := (&Config{ID: AnyID, IOMin: 64 << 10, IOOpt: 192 << 10}).withDefaults()
	if c.Queues != 1 || c.Depth != 128 || c.MaxIOBytes != 512<<10 || c.LogicalBlockSize != 4096 {
		t.Fatalf("defaults: %+v", c)
	}
	p, err := c.params(1<<30, 512<<10, NewMem(4096), false)
	if err != nil {
		t.Fatal(err)
	}
	b := p.Basic
	if b.LogicalBsShift != 12 || b.PhysicalBsShift != 12 || b.IOMinShift != 16 || b.IOOptShift != 17 ||
		b.MaxSectors != 1024 || b.DevSectors != 1<<21 || b.Attrs != ublksys.UBLK_ATTR_VOLATILE_CACHE|ublksys.UBLK_ATTR_FUA {
		t.Errorf("basic params %+v", b)
	}
	if p.Types != ublksys.UBLK_PARAM_TYPE_BASIC|ublksys.UBLK_PARAM_TYPE_DISCARD || p.Discard.MaxDiscardSectors != 1024 ||
		p.Discard.MaxDiscardSegments != 1 || p.Discard.DiscardGranularity != 4096 || p.Len != ublksys.ParamsSize {
		t.Errorf("discard params %+v", p.Discard)
	}
	// A backend without Discard gets write-zeroes only.
	p, _ = c.params(1<<30, 512<<10, NewNull(1<<30), false)
	if p.Discard.MaxDiscardSectors != 0 || p.Discard.MaxWriteZeroesSectors != 1024 {
		t.Errorf("null backend discard params %+v", p.Discard)
	}
	for _, bad := range []struct {
		lbs  int
		size int64
	}{{3000, 1 << 20}, {256, 1 << 20}, {4096, 1<<20 + 512}, {4096, 0}} {
		c := (&Config{LogicalBlockSize: bad.lbs}).withDefaults()
		if _, err := c.params(bad.size, 512<<10, NewNull(bad.size), false); err == nil {
			t.Errorf("block size %d, size %d accepted", bad.lbs, bad.size)
		}
	}
	if (*Config)(nil).withDefaults().ID != AnyID {
		t.Error("nil config must pick any id")
	}
	// Zero copy: the request pages are aligned to the logical block size,
	// and the parameters are sent with their dma member.
	c = (&Config{LogicalBlockSize: 512}).withDefaults()
	p, err = c.params(1<<30, 512<<10, NewNull(1<<30), true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len != ublksys.ParamsDMASize || p.Types&ublksys.UBLK_PARAM_TYPE_DMA_ALIGN == 0 || p.DMA.Alignment != 511 {
		t.Errorf("zero-copy params: len %d, types %#x, dma alignment %d", p.Len, p.Types, p.DMA.Alignment)
	}
}

// dirReader is a backend that plans reads (DirectReader), for
// zeroCopyWanted.
type dirReader struct{ *Null }

func (dirReader) PlanRead([]byte, int64) (PlannedRead, bool) { return nil, false }

func TestZeroCopyWanted(t *testing.T) {
	both := FeatureAutoBufReg | FeatureUserCopy | FeatureUserRecovery
	dr := dirReader{NewNull(1 << 20)}
	for _, tc := range []struct {
		name string
		cfg  Config
		b    Backend
		have Features
		want bool
	}{
		{"direct reader, 7.x", Config{}, dr, both, true},
		{"forced copy", Config{NoZeroCopy: true}, dr, both, false},
		{"no AUTO_BUF_REG (6.12)", Config{}, dr, FeatureUserCopy | FeatureUserRecovery, false},
		{"no USER_COPY", Config{}, dr, FeatureAutoBufReg, false},
		{"backend without PlanRead", Config{}, NewNull(1 << 20), both, false},
		{"features unknown (before 6.5)", Config{}, dr, 0, false},
	} {
		if got := zeroCopyWanted(&tc.cfg, tc.b, tc.have); got != tc.want {
			t.Errorf("%s: zeroCopyWanted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMemBackend(t *testing.T) {
	m := NewMem(1 << 16)
	data := bytes.Repeat([]byte{0xab}, 8192)
	if _, err := m.WriteAt(data, 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8192)
	if _, err := m.ReadAt(got, 4096); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if err := m.Discard(4096, 4096); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteZeroes(8192, 4096); err != nil {
		t.Fatal(err)
	}
	m.ReadAt(got, 4096)
	if !bytes.Equal(got, make([]byte, 8192)) {
		t.Fatal("discard/write-zeroes left data")
	}
	if _, err := m.WriteAt(data, 1<<16-4096); err == nil {
		t.Fatal("write past the end accepted")
	}
	if _, err := m.WriteAtFUA(data[:4096], 0); err != nil {
		t.Fatal(err)
	}
	m.Flush()
	if m.Writes.Load() != 2 || m.Reads.Load() != 2 || m.FUAWrites.Load() != 1 || m.Flushes.Load() != 1 || m.Discards.Load() != 1 || m.Zeroes.Load() != 1 {
		t.Fatalf("stats: writes %d reads %d fua %d flushes %d", m.Writes.Load(), m.Reads.Load(), m.FUAWrites.Load(), m.Flushes.Load())
	}
	var _ Discarder = m
	var _ ZeroWriter = m
	var _ FUAWriter = m
}

func TestFileBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	f, err := OpenFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != 1<<20 {
		t.Fatalf("size %d", f.Size())
	}
	f.WriteAt([]byte("hello"), 4096)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Reopening with size 0 takes the file's size and sees the data.
	f, err = OpenFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, 5)
	f.ReadAt(got, 4096)
	if f.Size() != 1<<20 || string(got) != "hello" {
		t.Fatalf("reopened: size %d, %q", f.Size(), got)
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "empty"), 0); err == nil {
		t.Fatal("empty file accepted")
	}
}
