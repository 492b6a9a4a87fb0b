//go:build linux

// Package nvmetest holds helpers for the guest-side tests of kernel/nvmet
// and kernel/nvmf: direct I/O with patterns, polling, and the modules the
// NVMe-oF tests load. It is imported by tests only.
package nvmetest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Modules returns the kernel modules an NVMe-oF guest loads: target and
// initiator over tcp, plus nvme-loop when loop is set (6.12 only).
func Modules(target, initiator, loop bool) []string {
	var m []string
	if target {
		m = append(m, "nvmet", "nvmet_tcp")
	}
	if initiator {
		m = append(m, "nvme_tcp")
	}
	if loop {
		m = append(m, "nvme_loop")
	}
	return m
}

// AlignedBuf returns a zeroed n-byte buffer aligned for O_DIRECT, from an
// anonymous mapping with transparent huge pages disabled.
//
// Why no THP: on Linux 6.1 (Debian 6.1.192) an nvme-tcp initiator and an
// nvmet-tcp target in the same kernel (127.0.0.1) hit "usercopy: Kernel
// memory exposure attempt detected from page alloc" and panic when an
// O_DIRECT buffer lies in a huge page: the initiator sends a multi-page
// bvec as one skb fragment that runs past the end of the huge folio, and
// hardened usercopy in the target's recvmsg aborts. Order-0 pages are not
// checked. Seen in TestIntegrationTarget/6.1; 6.12 is not affected.
func AlignedBuf(n int) []byte {
	size := (n + 4095) &^ 4095
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(fmt.Sprintf("nvmetest: mmap %d bytes: %v", size, err))
	}
	unix.Madvise(b, unix.MADV_NOHUGEPAGE)
	return b[:n]
}

// FreeBuf unmaps a buffer from AlignedBuf.
func FreeBuf(b []byte) { unix.Munmap(b[:cap(b)]) }

// Pattern fills b with a pattern derived from seed and the byte offset of
// each 8-byte word, so misplaced blocks are detected too.
func Pattern(b []byte, seed uint64, off int64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], seed^uint64(off+int64(i))*0x9e3779b97f4a7c15)
	}
}

// WritePattern writes n bytes of Pattern(seed) at off to dev with
// O_DIRECT and fsyncs.
func WritePattern(dev string, seed uint64, off int64, n int) error {
	f, err := os.OpenFile(dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := AlignedBuf(n)
	defer FreeBuf(b)
	Pattern(b, seed, off)
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("write %s at %d: %w", dev, off, err)
	}
	return f.Sync()
}

// CheckPattern reads n bytes at off with O_DIRECT and compares them with
// Pattern(seed).
func CheckPattern(dev string, seed uint64, off int64, n int) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := AlignedBuf(n)
	defer FreeBuf(b)
	if _, err := f.ReadAt(b, off); err != nil {
		return fmt.Errorf("read %s at %d: %w", dev, off, err)
	}
	want := make([]byte, n)
	Pattern(want, seed, off)
	if !bytes.Equal(b, want) {
		i := 0
		for i < n && b[i] == want[i] {
			i++
		}
		return fmt.Errorf("%s: data mismatch at byte %d of %d at offset %d", dev, i, n, off)
	}
	return nil
}

// Eventually polls cond every 50 ms until it returns nil or timeout
// passes, then fails the test with the last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
