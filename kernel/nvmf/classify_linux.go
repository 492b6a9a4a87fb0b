package nvmf

import (
	"errors"
	"fmt"
	"syscall"
)

// classifyConnectErrno wraps a connect errno with the matching sentinel.
func classifyConnectErrno(err error) error {
	switch {
	case errors.Is(err, syscall.EALREADY):
		return fmt.Errorf("%w: %w", ErrAlreadyConnected, err)
	case errors.Is(err, syscall.ENOKEY), errors.Is(err, syscall.EKEYREJECTED):
		return fmt.Errorf("%w: %w", ErrAuth, err)
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: %w (host not allowed, or no such subsystem on that port)", ErrRefused, err)
	case errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("%w (the kernel rejected an option; see dmesg)", err)
	}
	return err
}
