//go:build !linux

package uring

import (
	"fmt"
	"runtime"
)

// Ring is an io_uring instance (Linux only).
type Ring struct{}

// New returns an error wrapping ErrNotSupported: io_uring exists only on Linux.
func New(entries uint32, cfg *Config) (*Ring, error) {
	return nil, fmt.Errorf("io_uring on %s: %w (requires Linux)", runtime.GOOS, ErrNotSupported)
}

// Close does nothing.
func (r *Ring) Close() error { return nil }
