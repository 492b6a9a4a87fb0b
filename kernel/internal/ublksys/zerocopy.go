package ublksys

// Zero copy with automatic buffer registration (UBLK_F_AUTO_BUF_REG, Linux
// 6.16) and the io_uring fixed-buffer pieces it needs. Values from
// include/uapi/linux/ublk_cmd.h and io_uring.h of Linux 6.16+.

// UBLK_F_AUTO_BUF_REG: before a request with data is delivered, the kernel
// registers its pages in the fixed-buffer table of the ring that fetched
// the tag, at the index the FETCH/COMMIT_AND_FETCH command named; the
// commit unregisters them.
const UBLK_F_AUTO_BUF_REG = 1 << 11

// UBLK_AUTO_BUF_REG_FALLBACK (struct ublk_auto_buf_reg.flags): when the
// registration fails, deliver the request anyway with
// UBLK_IO_F_NEED_REG_BUF in its descriptor instead of failing it.
const UBLK_AUTO_BUF_REG_FALLBACK = 1 << 0

// UBLK_IO_F_NEED_REG_BUF (ublksrv_io_desc.op_flags): the automatic
// registration of this request failed; its pages are not in the table.
const UBLK_IO_F_NEED_REG_BUF = 1 << 17

// AutoBufRegAddr is struct ublk_auto_buf_reg as the kernel reads it from
// sqe->addr of a FETCH_REQ or COMMIT_AND_FETCH_REQ: bits 0-15 the buffer
// index, 16-23 the flags, the rest reserved (zero).
func AutoBufRegAddr(index uint16, flags uint8) uint64 {
	return uint64(index) | uint64(flags)<<16
}

// UBLK_PARAM_TYPE_DMA_ALIGN marks ublk_params.dma as set (6.14).
const UBLK_PARAM_TYPE_DMA_ALIGN = 1 << 4

// ParamDMAAlign is struct ublk_param_dma_align: the memory alignment the
// block layer guarantees for request buffers, as a mask (alignment - 1).
type ParamDMAAlign struct {
	Alignment uint32
	Pad       [4]uint8
}

// ParamSegment is struct ublk_param_segment.
type ParamSegment struct {
	SegBoundaryMask uint64
	MaxSegmentSize  uint32
	MaxSegments     uint16
	Pad             [2]uint8
}

// ParamsDMA is struct ublk_params up to its dma and seg members (6.14+).
// Kernels whose struct is shorter (6.12: Params) copy only their own
// length and ignore the types they do not know.
type ParamsDMA struct {
	Params
	DMA ParamDMAAlign
	Seg ParamSegment
}

// ParamsDMASize is sizeof(ParamsDMA).
const ParamsDMASize = ParamsSize + 8 + 16

// IORING_OP_READ_FIXED reads into a registered buffer: sqe->buf_index
// names it, sqe->addr is the address within it (for a kernel-registered
// request buffer, the byte offset from its start).
const IORING_OP_READ_FIXED = 4

// IORING_REGISTER_BUFFERS2 registers a buffer table described by
// RsrcRegister (5.13); with IORING_RSRC_REGISTER_SPARSE every entry starts
// empty (5.19).
const (
	IORING_REGISTER_BUFFERS2    = 15
	IORING_RSRC_REGISTER_SPARSE = 1 << 0
)

// RsrcRegister is struct io_uring_rsrc_register.
type RsrcRegister struct {
	Nr    uint32
	Flags uint32
	Resv2 uint64
	Data  uint64
	Tags  uint64
}

// RsrcRegisterSize is sizeof(struct io_uring_rsrc_register).
const RsrcRegisterSize = 32
