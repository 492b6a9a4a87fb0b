package nvmf

import (
	"errors"
	"syscall"
	"testing"
)

func TestClassifyConnectErrno(t *testing.T) {
	for _, tt := range []struct {
		errno syscall.Errno
		want  error
	}{
		{syscall.EIO, ErrRefused}, {syscall.ECONNREFUSED, ErrRefused},
		{syscall.ENOKEY, ErrAuth}, {syscall.EKEYREJECTED, ErrAuth},
		{syscall.ETIMEDOUT, ErrUnreachable}, {syscall.EHOSTUNREACH, ErrUnreachable},
		{syscall.EALREADY, ErrAlreadyConnected},
	} {
		err := classifyConnectErrno(tt.errno)
		if !errors.Is(err, tt.want) || !errors.Is(err, tt.errno) {
			t.Errorf("%v -> %v, want %v wrapping the errno", tt.errno, err, tt.want)
		}
	}
	if err := classifyConnectErrno(syscall.EINVAL); !errors.Is(err, syscall.EINVAL) || errors.Is(err, ErrRefused) {
		t.Errorf("EINVAL -> %v", err)
	}
}
