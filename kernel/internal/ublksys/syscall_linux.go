//go:build linux

package ublksys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Setup is io_uring_setup(2). It returns the ring fd.
func Setup(entries uint32, p *UringParams) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// Enter is io_uring_enter(2) without a signal mask. It returns the number of
// SQEs consumed.
func Enter(fd int, toSubmit, minComplete, flags uint32) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), 0, 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}

// Register is io_uring_register(2).
func Register(fd int, opcode uint32, arg unsafe.Pointer, nrArgs uint32) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), uintptr(opcode), uintptr(arg), uintptr(nrArgs), 0, 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}
