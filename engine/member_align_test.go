package engine

import (
	"testing"
	"unsafe"
)

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{0, 1, 4096, 65536, 100000} {
		b := AlignedBuffer(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("n=%d: len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%BufferAlign != 0 {
			t.Fatalf("n=%d: address %#x not aligned to %d", n, p, BufferAlign)
		}
	}
}
