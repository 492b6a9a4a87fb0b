package ublksys

// ublk uapi (include/uapi/linux/ublk_cmd.h).

// Legacy (plain number) control commands; the ioctl-encoded form is
// CtrlOp(nr, dir) and what kernels with UBLK_F_CMD_IOCTL_ENCODE (6.3+)
// prefer. Kernels built without CONFIG_BLKDEV_UBLK_LEGACY_OPCODES accept only
// the encoded form.
const (
	UBLK_CMD_GET_QUEUE_AFFINITY  = 0x01
	UBLK_CMD_GET_DEV_INFO        = 0x02
	UBLK_CMD_ADD_DEV             = 0x04
	UBLK_CMD_DEL_DEV             = 0x05
	UBLK_CMD_START_DEV           = 0x06
	UBLK_CMD_STOP_DEV            = 0x07
	UBLK_CMD_SET_PARAMS          = 0x08
	UBLK_CMD_GET_PARAMS          = 0x09
	UBLK_CMD_START_USER_RECOVERY = 0x10
	UBLK_CMD_END_USER_RECOVERY   = 0x11
	UBLK_CMD_GET_DEV_INFO2       = 0x12
	UBLK_CMD_GET_FEATURES        = 0x13 // exists only in encoded form
	UBLK_CMD_DEL_DEV_ASYNC       = 0x14 // exists only in encoded form
)

// Legacy I/O commands.
const (
	UBLK_IO_FETCH_REQ            = 0x20
	UBLK_IO_COMMIT_AND_FETCH_REQ = 0x21
	UBLK_IO_NEED_GET_DATA        = 0x22
)

// Direction bits of the asm-generic ioctl encoding (x86, arm64).
const (
	iocWrite = 1
	iocRead  = 2
)

func ioc(dir, typ, nr, size uint32) uint32 {
	return dir<<30 | size<<16 | typ<<8 | nr
}

// Sizes of the command payloads, as the ioctl encoding records them.
const (
	CtrlCmdSize = 32 // struct ublksrv_ctrl_cmd
	IOCmdSize   = 16 // struct ublksrv_io_cmd
	IODescSize  = 24 // struct ublksrv_io_desc
	DevInfoSize = 64 // struct ublksrv_ctrl_dev_info
	ParamsSize  = 112
)

// Encoded commands (UBLK_U_CMD_*, UBLK_U_IO_*).
const (
	UBLK_U_CMD_GET_QUEUE_AFFINITY  = iocRead<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_GET_QUEUE_AFFINITY
	UBLK_U_CMD_GET_DEV_INFO        = iocRead<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_GET_DEV_INFO
	UBLK_U_CMD_ADD_DEV             = (iocRead|iocWrite)<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_ADD_DEV
	UBLK_U_CMD_DEL_DEV             = (iocRead|iocWrite)<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_DEL_DEV
	UBLK_U_CMD_START_DEV           = (iocRead|iocWrite)<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_START_DEV
	UBLK_U_CMD_STOP_DEV            = (iocRead|iocWrite)<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_STOP_DEV
	UBLK_U_CMD_SET_PARAMS          = (iocRead|iocWrite)<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_SET_PARAMS
	UBLK_U_CMD_GET_PARAMS          = iocRead<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_GET_PARAMS
	UBLK_U_CMD_START_USER_RECOVERY = (iocRead|iocWrite)<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_START_USER_RECOVERY
	UBLK_U_CMD_END_USER_RECOVERY   = (iocRead|iocWrite)<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_END_USER_RECOVERY
	UBLK_U_CMD_GET_DEV_INFO2       = iocRead<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_GET_DEV_INFO2
	UBLK_U_CMD_GET_FEATURES        = iocRead<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_GET_FEATURES
	UBLK_U_CMD_DEL_DEV_ASYNC       = iocRead<<30 | CtrlCmdSize<<16 | 'u'<<8 | UBLK_CMD_DEL_DEV_ASYNC

	UBLK_U_IO_FETCH_REQ            = (iocRead|iocWrite)<<30 | IOCmdSize<<16 | 'u'<<8 | UBLK_IO_FETCH_REQ
	UBLK_U_IO_COMMIT_AND_FETCH_REQ = (iocRead|iocWrite)<<30 | IOCmdSize<<16 | 'u'<<8 | UBLK_IO_COMMIT_AND_FETCH_REQ
	UBLK_U_IO_NEED_GET_DATA        = (iocRead|iocWrite)<<30 | IOCmdSize<<16 | 'u'<<8 | UBLK_IO_NEED_GET_DATA
)

// EncodeCtrl returns the command number to put in sqe->cmd_op for control
// command nr: ioctl-encoded when encoded is true, the plain number otherwise.
// It reports false for numbers that have no encoding defined here.
func EncodeCtrl(nr uint32, encoded bool) (uint32, bool) {
	switch nr {
	case UBLK_CMD_GET_QUEUE_AFFINITY, UBLK_CMD_GET_DEV_INFO, UBLK_CMD_GET_PARAMS,
		UBLK_CMD_GET_DEV_INFO2, UBLK_CMD_GET_FEATURES, UBLK_CMD_DEL_DEV_ASYNC:
		if !encoded {
			return nr, nr < UBLK_CMD_GET_FEATURES
		}
		return ioc(iocRead, 'u', nr, CtrlCmdSize), true
	case UBLK_CMD_ADD_DEV, UBLK_CMD_DEL_DEV, UBLK_CMD_START_DEV, UBLK_CMD_STOP_DEV,
		UBLK_CMD_SET_PARAMS, UBLK_CMD_START_USER_RECOVERY, UBLK_CMD_END_USER_RECOVERY:
		if !encoded {
			return nr, true
		}
		return ioc(iocRead|iocWrite, 'u', nr, CtrlCmdSize), true
	}
	return 0, false
}

// EncodeIO is EncodeCtrl for the I/O commands (FETCH_REQ, COMMIT_AND_FETCH_REQ,
// NEED_GET_DATA).
func EncodeIO(nr uint32, encoded bool) (uint32, bool) {
	switch nr {
	case UBLK_IO_FETCH_REQ, UBLK_IO_COMMIT_AND_FETCH_REQ, UBLK_IO_NEED_GET_DATA:
		if !encoded {
			return nr, true
		}
		return ioc(iocRead|iocWrite, 'u', nr, IOCmdSize), true
	}
	return 0, false
}

// I/O results.
const (
	UBLK_IO_RES_OK            = 0
	UBLK_IO_RES_NEED_GET_DATA = 1
	// UBLK_IO_RES_ABORT is -ENODEV: the command will not be re-fetched.
	UBLK_IO_RES_ABORT = -19
)

// Offsets and limits of the data and descriptor areas of /dev/ublkcN.
const (
	UBLKSRV_CMD_BUF_OFFSET = 0
	UBLKSRV_IO_BUF_OFFSET  = 0x80000000
	UBLK_MAX_QUEUE_DEPTH   = 4096
	UBLK_IO_BUF_BITS       = 25
	UBLK_TAG_OFF           = UBLK_IO_BUF_BITS
	UBLK_TAG_BITS          = 16
	UBLK_QID_OFF           = UBLK_TAG_OFF + UBLK_TAG_BITS
	UBLK_QID_BITS          = 12
	UBLK_MAX_NR_QUEUES     = 1 << UBLK_QID_BITS
	UBLK_FEATURES_LEN      = 8
)

// UserCopyOffset is the file offset on /dev/ublkcN that addresses byte off of
// the request (qid, tag) in UBLK_F_USER_COPY mode.
func UserCopyOffset(qid, tag uint16, off uint32) int64 {
	return UBLKSRV_IO_BUF_OFFSET + int64(qid)<<UBLK_QID_OFF + int64(tag)<<UBLK_TAG_OFF + int64(off)
}

// DescAreaOffset is the mmap offset of queue qid's descriptor array. The
// kernel spaces queues by the size a queue of UBLK_MAX_QUEUE_DEPTH needs, not
// by the device's depth (drivers/block/ublk_drv.c, ublk_ch_mmap).
func DescAreaOffset(qid int, pageSize int) int64 {
	return int64(qid) * int64(DescAreaSize(UBLK_MAX_QUEUE_DEPTH, pageSize))
}

// DescAreaSize is the length to mmap for a queue of depth entries.
func DescAreaSize(depth, pageSize int) int {
	n := depth * IODescSize
	return (n + pageSize - 1) / pageSize * pageSize
}

// Feature flags (UBLK_F_*).
const (
	UBLK_F_SUPPORT_ZERO_COPY      = 1 << 0
	UBLK_F_URING_CMD_COMP_IN_TASK = 1 << 1
	UBLK_F_NEED_GET_DATA          = 1 << 2
	UBLK_F_USER_RECOVERY          = 1 << 3
	UBLK_F_USER_RECOVERY_REISSUE  = 1 << 4
	UBLK_F_UNPRIVILEGED_DEV       = 1 << 5
	UBLK_F_CMD_IOCTL_ENCODE       = 1 << 6
	UBLK_F_USER_COPY              = 1 << 7
	UBLK_F_ZONED                  = 1 << 8
	// Newer than the 6.12 header; numbers from later uapi headers.
	UBLK_F_USER_RECOVERY_FAIL_IO = 1 << 9
)

// Device states.
const (
	UBLK_S_DEV_DEAD     = 0
	UBLK_S_DEV_LIVE     = 1
	UBLK_S_DEV_QUIESCED = 2
)

// CtrlCmd is struct ublksrv_ctrl_cmd, carried in sqe->cmd of a control
// command (needs a ring with IORING_SETUP_SQE128).
type CtrlCmd struct {
	DevID      uint32
	QueueID    uint16 // 0xffff when the command is not for a queue
	Len        uint16
	Addr       uint64
	Data       [1]uint64
	DevPathLen uint16
	Pad        uint16
	Reserved   uint32
}

// DevInfo is struct ublksrv_ctrl_dev_info.
type DevInfo struct {
	NrHwQueues    uint16
	QueueDepth    uint16
	State         uint16
	Pad0          uint16
	MaxIOBufBytes uint32
	DevID         uint32
	UblksrvPid    int32
	Pad1          uint32
	Flags         uint64
	UblksrvFlags  uint64
	OwnerUID      uint32
	OwnerGID      uint32
	Reserved1     uint64
	Reserved2     uint64
}

// I/O operations (low 8 bits of IODesc.OpFlags).
const (
	UBLK_IO_OP_READ         = 0
	UBLK_IO_OP_WRITE        = 1
	UBLK_IO_OP_FLUSH        = 2
	UBLK_IO_OP_DISCARD      = 3
	UBLK_IO_OP_WRITE_SAME   = 4
	UBLK_IO_OP_WRITE_ZEROES = 5
	UBLK_IO_OP_REPORT_ZONES = 18
)

// I/O flags (IODesc.OpFlags; these constants already include the shift).
const (
	UBLK_IO_F_FAILFAST_DEV       = 1 << 8
	UBLK_IO_F_FAILFAST_TRANSPORT = 1 << 9
	UBLK_IO_F_FAILFAST_DRIVER    = 1 << 10
	UBLK_IO_F_META               = 1 << 11
	UBLK_IO_F_FUA                = 1 << 13
	UBLK_IO_F_NOUNMAP            = 1 << 15
	UBLK_IO_F_SWAP               = 1 << 16
)

// IODesc is struct ublksrv_io_desc, one entry of the read-only descriptor
// array the kernel shares per queue.
type IODesc struct {
	OpFlags     uint32
	NrSectors   uint32 // union: nr_sectors, nr_zones
	StartSector uint64
	Addr        uint64
}

// IOCmd is struct ublksrv_io_cmd, carried in sqe->cmd of an I/O command.
type IOCmd struct {
	QID    uint16
	Tag    uint16
	Result int32
	Addr   uint64 // union: addr, zone_append_lba
}

// Parameter attributes (ublk_param_basic.attrs).
const (
	UBLK_ATTR_READ_ONLY      = 1 << 0
	UBLK_ATTR_ROTATIONAL     = 1 << 1
	UBLK_ATTR_VOLATILE_CACHE = 1 << 2
	UBLK_ATTR_FUA            = 1 << 3
)

// Parameter types (ublk_params.types).
const (
	UBLK_PARAM_TYPE_BASIC   = 1 << 0
	UBLK_PARAM_TYPE_DISCARD = 1 << 1
	UBLK_PARAM_TYPE_DEVT    = 1 << 2
	UBLK_PARAM_TYPE_ZONED   = 1 << 3
)

// ParamBasic is struct ublk_param_basic.
type ParamBasic struct {
	Attrs            uint32
	LogicalBsShift   uint8
	PhysicalBsShift  uint8
	IOOptShift       uint8
	IOMinShift       uint8
	MaxSectors       uint32
	ChunkSectors     uint32
	DevSectors       uint64
	VirtBoundaryMask uint64
}

// ParamDiscard is struct ublk_param_discard.
type ParamDiscard struct {
	DiscardAlignment      uint32
	DiscardGranularity    uint32
	MaxDiscardSectors     uint32
	MaxWriteZeroesSectors uint32
	MaxDiscardSegments    uint16
	Reserved0             uint16
}

// ParamDevt is struct ublk_param_devt (read-only, GET_PARAMS only).
type ParamDevt struct {
	CharMajor uint32
	CharMinor uint32
	DiskMajor uint32
	DiskMinor uint32
}

// ParamZoned is struct ublk_param_zoned.
type ParamZoned struct {
	MaxOpenZones         uint32
	MaxActiveZones       uint32
	MaxZoneAppendSectors uint32
	Reserved             [20]uint8
}

// Params is struct ublk_params.
type Params struct {
	Len     uint32
	Types   uint32
	Basic   ParamBasic
	Discard ParamDiscard
	Devt    ParamDevt
	Zoned   ParamZoned
}
