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
	} {
		if got := errnoResult(tt.err); got != tt.want {
			t.Errorf("errnoResult(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
