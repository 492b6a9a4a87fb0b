package ublk

import (
	"errors"
	"fmt"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
)

// Request operations, as the kernel describes them in ublksrv_io_desc.
const (
	opRead        = ublksys.UBLK_IO_OP_READ
	opWrite       = ublksys.UBLK_IO_OP_WRITE
	opFlush       = ublksys.UBLK_IO_OP_FLUSH
	opDiscard     = ublksys.UBLK_IO_OP_DISCARD
	opWriteZeroes = ublksys.UBLK_IO_OP_WRITE_ZEROES
)

var (
	errUnsupportedOp = errors.New("unsupported ublk operation")
	errBadRange      = errors.New("request outside the device")
)

// request is a decoded ublksrv_io_desc, in bytes.
type request struct {
	op    uint8
	flags uint32 // UBLK_IO_F_* (already shifted: bits 8-31 of op_flags)
	off   int64
	len   int64
}

func (r request) fua() bool { return r.flags&ublksys.UBLK_IO_F_FUA != 0 }

// maxSector keeps sector arithmetic far from int64 overflow.
const maxSector = 1 << 54

// decodeDesc checks a descriptor the kernel wrote against the device size
// and the per-tag buffer size and decodes it. The kernel is trusted, but a
// decoding bug must become an I/O error, never an out-of-range access.
func decodeDesc(d ublksys.IODesc, devSize int64, bufSize int) (request, error) {
	r := request{op: uint8(d.OpFlags & 0xff), flags: d.OpFlags &^ 0xff}
	if r.op == opFlush {
		// A flush has no range; the kernel leaves its sector at -1
		// (blk_rq_init).
		return r, nil
	}
	if d.StartSector >= maxSector {
		return r, fmt.Errorf("%w: start sector %d", errBadRange, d.StartSector)
	}
	r.off = int64(d.StartSector) << 9
	r.len = int64(d.NrSectors) << 9
	switch r.op {
	case opRead, opWrite:
		if r.len == 0 || r.len > int64(bufSize) {
			return r, fmt.Errorf("%w: %d bytes with %d-byte buffers", errBadRange, r.len, bufSize)
		}
	case opDiscard, opWriteZeroes:
		if r.len == 0 {
			return r, fmt.Errorf("%w: empty range", errBadRange)
		}
	default:
		return r, fmt.Errorf("%w %d", errUnsupportedOp, r.op)
	}
	if r.off+r.len > devSize {
		return r, fmt.Errorf("%w: %d+%d beyond %d", errBadRange, r.off, r.len, devSize)
	}
	return r, nil
}

// encodeDesc is decodeDesc's inverse, for tests and fakes.
func encodeDesc(r request) ublksys.IODesc {
	return ublksys.IODesc{OpFlags: uint32(r.op) | r.flags, NrSectors: uint32(r.len >> 9), StartSector: uint64(r.off >> 9)}
}
