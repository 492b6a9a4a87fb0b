package ublksys

// io_uring uapi (include/uapi/linux/io_uring.h).

// SQE is struct io_uring_sqe: one 64-byte submission queue entry. Unions are
// represented by their first or most useful member; see the comments.
type SQE struct {
	Opcode      uint8
	Flags       uint8
	Ioprio      uint16
	Fd          int32
	Off         uint64 // union: off, addr2, {cmd_op u32, __pad1 u32}
	Addr        uint64 // union: addr, splice_off_in, {level, optname}
	Len         uint32
	OpFlags     uint32 // union: rw_flags, fsync_flags, uring_cmd_flags, ...
	UserData    uint64
	BufIndex    uint16 // union: buf_index, buf_group
	Personality uint16
	SpliceFdIn  int32     // union: splice_fd_in, file_index, optlen, {addr_len, __pad3}
	Addr3       uint64    // union: {addr3, __pad2[1]}, optval, cmd[0]
	Pad2        [1]uint64 // __pad2
}

// Sizes of a submission queue entry, normal and with IORING_SETUP_SQE128.
const (
	SQESize    = 64
	SQE128Size = 128
	// SQECmdOffset is where sqe->cmd (the URING_CMD payload) starts.
	SQECmdOffset = 48
	// SQECmdOpOffset is where sqe->cmd_op (aliasing the low half of off) is.
	SQECmdOpOffset = 8
)

// CQE is struct io_uring_cqe (16 bytes, without the IORING_SETUP_CQE32 tail).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// SQRingOffsets is struct io_sqring_offsets.
type SQRingOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Flags       uint32
	Dropped     uint32
	Array       uint32
	Resv1       uint32
	UserAddr    uint64
}

// CQRingOffsets is struct io_cqring_offsets.
type CQRingOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Overflow    uint32
	Cqes        uint32
	Flags       uint32
	Resv1       uint32
	UserAddr    uint64
}

// UringParams is struct io_uring_params, the in/out argument of io_uring_setup.
type UringParams struct {
	SqEntries    uint32
	CqEntries    uint32
	Flags        uint32
	SqThreadCPU  uint32
	SqThreadIdle uint32
	Features     uint32
	WqFd         uint32
	Resv         [3]uint32
	SqOff        SQRingOffsets
	CqOff        CQRingOffsets
}

// ProbeOp is struct io_uring_probe_op.
type ProbeOp struct {
	Op    uint8
	Resv  uint8
	Flags uint16
	Resv2 uint32
}

// Probe is struct io_uring_probe without its flexible ops[] tail.
type Probe struct {
	LastOp uint8
	OpsLen uint8
	Resv   uint16
	Resv2  [3]uint32
}

// Opcodes (enum io_uring_op), only those fabraid uses.
const (
	IORING_OP_NOP       = 0
	IORING_OP_READV     = 1
	IORING_OP_WRITEV    = 2
	IORING_OP_FSYNC     = 3
	IORING_OP_READ      = 22
	IORING_OP_WRITE     = 23
	IORING_OP_URING_CMD = 46
	IORING_OP_LAST_6_12 = 58 // IORING_OP_LAST in Linux 6.12
)

// sqe->flags.
const (
	IOSQE_FIXED_FILE       = 1 << 0
	IOSQE_IO_DRAIN         = 1 << 1
	IOSQE_IO_LINK          = 1 << 2
	IOSQE_IO_HARDLINK      = 1 << 3
	IOSQE_ASYNC            = 1 << 4
	IOSQE_BUFFER_SELECT    = 1 << 5
	IOSQE_CQE_SKIP_SUCCESS = 1 << 6
)

// io_uring_setup flags.
const (
	IORING_SETUP_IOPOLL        = 1 << 0
	IORING_SETUP_SQPOLL        = 1 << 1
	IORING_SETUP_SQ_AFF        = 1 << 2
	IORING_SETUP_CQSIZE        = 1 << 3
	IORING_SETUP_CLAMP         = 1 << 4
	IORING_SETUP_ATTACH_WQ     = 1 << 5
	IORING_SETUP_R_DISABLED    = 1 << 6
	IORING_SETUP_SUBMIT_ALL    = 1 << 7
	IORING_SETUP_COOP_TASKRUN  = 1 << 8
	IORING_SETUP_TASKRUN_FLAG  = 1 << 9
	IORING_SETUP_SQE128        = 1 << 10
	IORING_SETUP_CQE32         = 1 << 11
	IORING_SETUP_SINGLE_ISSUER = 1 << 12
	IORING_SETUP_DEFER_TASKRUN = 1 << 13
	IORING_SETUP_NO_MMAP       = 1 << 14
	IORING_SETUP_NO_SQARRAY    = 1 << 16
)

// sqe->fsync_flags.
const IORING_FSYNC_DATASYNC = 1 << 0

// io_uring_enter flags.
const (
	IORING_ENTER_GETEVENTS = 1 << 0
	IORING_ENTER_SQ_WAKEUP = 1 << 1
	IORING_ENTER_SQ_WAIT   = 1 << 2
	IORING_ENTER_EXT_ARG   = 1 << 3
)

// sq_ring->flags.
const (
	IORING_SQ_NEED_WAKEUP = 1 << 0
	IORING_SQ_CQ_OVERFLOW = 1 << 1
	IORING_SQ_TASKRUN     = 1 << 2
)

// mmap offsets of the rings.
const (
	IORING_OFF_SQ_RING = 0
	IORING_OFF_CQ_RING = 0x8000000
	IORING_OFF_SQES    = 0x10000000
)

// io_uring_params.features.
const (
	IORING_FEAT_SINGLE_MMAP = 1 << 0
	IORING_FEAT_NODROP      = 1 << 1
	IORING_FEAT_EXT_ARG     = 1 << 8
)

// io_uring_register opcodes.
const (
	IORING_REGISTER_PROBE = 8
)

// IO_URING_OP_SUPPORTED is io_uring_probe_op.flags for a supported opcode.
const IO_URING_OP_SUPPORTED = 1 << 0
