//go:build !linux

package ublk

import (
	"context"
	"fmt"
	"runtime"
)

// ublk exists only on Linux; elsewhere every entry point returns an error
// wrapping ErrNotSupported, so packages that import this one still build.

var errOS = fmt.Errorf("ublk on %s: %w (requires Linux)", runtime.GOOS, ErrNotSupported)

// ControlPath is the ublk control device.
const ControlPath = "/dev/ublk-control"

// Control is the ublk control device (Linux only).
type Control struct{}

// OpenControl returns an error wrapping ErrNotSupported.
func OpenControl() (*Control, error) { return nil, errOS }

// Close does nothing.
func (c *Control) Close() error { return nil }

// Features returns 0.
func (c *Control) Features() Features { return 0 }

// DevInfo describes an existing ublk device.
type DevInfo struct {
	ID, Queues, Depth, MaxIOBytes, PID int
	State                              State
	Flags                              Features
}

// State is a ublk device state.
type State uint16

func (s State) String() string { return fmt.Sprintf("state(%d)", uint16(s)) }

// Info returns an error wrapping ErrNotSupported.
func (c *Control) Info(id int) (*DevInfo, error) { return nil, errOS }

// Delete returns an error wrapping ErrNotSupported.
func (c *Control) Delete(id int) error { return errOS }

// List returns no devices.
func List() ([]int, error) { return nil, nil }

// Device is a served ublk device (Linux only).
type Device struct{}

// Create returns an error wrapping ErrNotSupported.
func Create(ctl *Control, b Backend, cfg *Config) (*Device, error) { return nil, errOS }

// Recover returns an error wrapping ErrNotSupported.
func Recover(ctl *Control, id int, b Backend, cfg *Config) (*Device, error) { return nil, errOS }

func (d *Device) ID() int               { return -1 }
func (d *Device) BlockPath() string     { return "" }
func (d *Device) CharPath() string      { return "" }
func (d *Device) Flags() Features       { return 0 }
func (d *Device) ZeroCopy() bool        { return false }
func (d *Device) Queues() int           { return 0 }
func (d *Device) Depth() int            { return 0 }
func (d *Device) Done() <-chan struct{} { return nil }
func (d *Device) Wait() error           { return errOS }
func (d *Device) Close() error          { return errOS }

// Run returns an error wrapping ErrNotSupported.
func (d *Device) Run(ctx context.Context) error { return errOS }

// HaveFeatures returns an error wrapping ErrNotSupported.
func HaveFeatures(want Features) error { return errOS }
