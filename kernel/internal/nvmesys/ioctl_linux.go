package nvmesys

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GetLogPage issues an admin Get Log Page for log lid at byte offset off
// into buf (length a non-zero multiple of 4) on the controller character
// device fd (/dev/nvmeX). A positive status is the NVMe status field the
// controller returned.
func GetLogPage(fd int, lid uint8, off uint64, buf []byte) error {
	if len(buf) == 0 || len(buf)%4 != 0 {
		return fmt.Errorf("get log page %#x: buffer length %d is not a positive multiple of 4", lid, len(buf))
	}
	numd := uint32(len(buf)/4 - 1) // 0's based dword count
	cmd := PassthruCmd{
		Opcode:  AdminGetLogPage,
		Addr:    uint64(uintptr(unsafe.Pointer(&buf[0]))),
		DataLen: uint32(len(buf)),
		Cdw10:   uint32(lid) | (numd&0xffff)<<16,
		Cdw11:   numd >> 16,
		Cdw12:   uint32(off),
		Cdw13:   uint32(off >> 32),
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), IoctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return fmt.Errorf("get log page %#x: %w", lid, errno)
	}
	if int32(r) > 0 {
		return fmt.Errorf("get log page %#x: nvme status %#x", lid, r)
	}
	return nil
}
