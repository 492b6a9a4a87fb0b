//go:build linux

package ublk

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

func TestErrnoResult(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int32
	}{
		{unix.EIO, -5},
		{fmt.Errorf("member: %w", unix.ENOSPC), -28},
		{errors.New("plain"), -5},
		{fmt.Errorf("member: %w", unix.ENODATA), -5}, // ENODATA is kept for a hand-off
	} {
		if got := errnoResult(tt.err); got != tt.want {
			t.Errorf("errnoResult(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// HandOffResult is -ENODATA, and a handed-off backend's failures complete
// with it whatever their error; others keep their errno.
func TestErrResultHandOff(t *testing.T) {
	if HandOffResult != -int32(unix.ENODATA) {
		t.Fatalf("HandOffResult %d, want -ENODATA (%d)", HandOffResult, -int32(unix.ENODATA))
	}
	h := &handOffMem{Mem: NewMem(4096)}
	q := &queue{d: &Device{backend: h}}
	if got := q.errResult(unix.ENOSPC); got != -int32(unix.ENOSPC) {
		t.Errorf("before the hand-off: %d, want -ENOSPC", got)
	}
	h.off = true
	for _, err := range []error{unix.EIO, errors.New("volume frozen and handed off"), unix.ENOSPC} {
		if got := q.errResult(err); got != HandOffResult {
			t.Errorf("handed off, %v: %d, want %d", err, got, HandOffResult)
		}
	}
	if got := (&queue{d: &Device{backend: NewMem(4096)}}).errResult(unix.ENOSPC); got != -int32(unix.ENOSPC) {
		t.Errorf("a backend without HandOffer: %d, want -ENOSPC", got)
	}
}

type handOffMem struct {
	*Mem
	off bool
}

func (h *handOffMem) HandedOff() bool { return h.off }
