//go:build linux

package uring

import (
	"unsafe"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
)

// Opcodes fabraid uses (enum io_uring_op).
const (
	OpNop      = ublksys.IORING_OP_NOP
	OpFsync    = ublksys.IORING_OP_FSYNC
	OpRead     = ublksys.IORING_OP_READ
	OpWrite    = ublksys.IORING_OP_WRITE
	OpURingCmd = ublksys.IORING_OP_URING_CMD
)

// FsyncDataSync makes PrepFsync an fdatasync.
const FsyncDataSync = ublksys.IORING_FSYNC_DATASYNC

// PrepNop prepares a no-op.
func (s *SQE) PrepNop(userData uint64) {
	s.Opcode = OpNop
	s.UserData = userData
}

// PrepRead prepares a read of len(buf) bytes at off into buf. The kernel may
// fill buf after io_uring_enter returned, so buf must stay alive and must
// not be on a goroutine stack (stacks move when they grow): use mmap'd or
// heap memory that the caller keeps referenced until the completion.
func (s *SQE) PrepRead(fd int, buf []byte, off int64, userData uint64) {
	s.prepRW(OpRead, fd, buf, off, userData)
}

// PrepWrite prepares a write of buf at off. See PrepRead for buf's lifetime.
func (s *SQE) PrepWrite(fd int, buf []byte, off int64, userData uint64) {
	s.prepRW(OpWrite, fd, buf, off, userData)
}

func (s *SQE) prepRW(op uint8, fd int, buf []byte, off int64, userData uint64) {
	s.Opcode = op
	s.Fd = int32(fd)
	s.Off = uint64(off)
	if len(buf) > 0 {
		s.Addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	s.Len = uint32(len(buf))
	s.UserData = userData
}

// PrepFsync prepares an fsync (flags 0) or fdatasync (FsyncDataSync).
func (s *SQE) PrepFsync(fd int, flags uint32, userData uint64) {
	s.Opcode = OpFsync
	s.Fd = int32(fd)
	s.OpFlags = flags
	s.UserData = userData
}

// PrepURingCmd prepares an IORING_OP_URING_CMD with command number cmdOp on
// fd. The command payload goes into CmdArea.
func (s *SQE) PrepURingCmd(fd int, cmdOp uint32, userData uint64) {
	s.Opcode = OpURingCmd
	s.Fd = int32(fd)
	*(*uint32)(unsafe.Add(unsafe.Pointer(s), ublksys.SQECmdOpOffset)) = cmdOp
	s.UserData = userData
}

// CmdArea returns a pointer to the entry's command payload (sqe->cmd): 16
// bytes in a normal ring, 80 bytes in a ring set up with Config.SQE128.
// Writing beyond that is a bug.
func (s *SQE) CmdArea() unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(s), ublksys.SQECmdOffset)
}

// OpReadFixed is IORING_OP_READ_FIXED.
const OpReadFixed = ublksys.IORING_OP_READ_FIXED

// PrepReadFixed prepares a read of n bytes at off into registered buffer
// bufIndex, at addr within it. For a buffer the kernel registered (a ublk
// request's pages), addr is the byte offset from the buffer's start.
func (s *SQE) PrepReadFixed(fd int, bufIndex uint16, addr uint64, n int, off int64, userData uint64) {
	s.Opcode = OpReadFixed
	s.Fd = int32(fd)
	s.Off = uint64(off)
	s.Addr = addr
	s.Len = uint32(n)
	s.BufIndex = bufIndex
	s.UserData = userData
}
