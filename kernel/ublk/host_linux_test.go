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

// HandOffResult is -ENODATA, and a request whose error hands it off
// (HandOffError, wrapped or not) completes with it; others keep their
// errno.
func TestErrResultHandOff(t *testing.T) {
	if HandOffResult != -int32(unix.ENODATA) {
		t.Fatalf("HandOffResult %d, want -ENODATA (%d)", HandOffResult, -int32(unix.ENODATA))
	}
	q := &queue{d: &Device{backend: NewMem(4096)}}
	if got := q.errResult(unix.ENOSPC); got != -int32(unix.ENOSPC) {
		t.Errorf("plain ENOSPC: %d, want -ENOSPC", got)
	}
	for _, err := range []error{handOffErr{}, fmt.Errorf("write: %w", handOffErr{}), errors.Join(unix.EIO, handOffErr{})} {
		if got := q.errResult(err); got != HandOffResult {
			t.Errorf("handed off, %v: %d, want %d", err, got, HandOffResult)
		}
	}
	if got := q.errResult(fmt.Errorf("not now: %w", notHandOffErr{})); got != -int32(unix.EIO) {
		t.Errorf("an error whose HandOff is false: %d, want -EIO", got)
	}
}

// handOffErr is a hand-off error (what the engine's ErrHandedOff is).
type handOffErr struct{}

func (handOffErr) Error() string { return "volume frozen and handed off" }
func (handOffErr) HandOff() bool { return true }

type notHandOffErr struct{}

func (notHandOffErr) Error() string { return "plain" }
func (notHandOffErr) HandOff() bool { return false }
