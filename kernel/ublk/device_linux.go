//go:build linux

package ublk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
	"golang.org/x/sys/unix"
)

// Device is a ublk device served by this process: /dev/ublkbN backed by a
// Backend. Its methods are safe for concurrent use.
type Device struct {
	ctl     *Control
	backend Backend
	cfg     Config
	info    ublksys.DevInfo
	size    int64 // bytes, from the backend
	cdev    *os.File

	queues   []*queue
	wg       sync.WaitGroup
	done     chan struct{}
	errMu    sync.Mutex
	queueErr error
	failed   chan struct{} // closed on the first queue failure

	closeOnce sync.Once
	closeErr  error
}

// Create adds a ublk device backed by b, starts serving it and returns once
// /dev/ublkbN exists. ctl must stay open until the device is closed.
func Create(ctl *Control, b Backend, cfg *Config) (*Device, error) {
	c := cfg.withDefaults()
	want := Features(0)
	if !c.NoRecovery {
		want |= FeatureUserRecovery | FeatureRecoveryReissue
	}
	if c.UserCopy {
		want |= FeatureUserCopy
	}
	have := ctl.Features()
	if have != 0 {
		if err := missingError(want, have); err != nil {
			return nil, fmt.Errorf("create ublk device: %w", err)
		}
	}
	id := uint32(c.ID)
	if c.ID < 0 {
		id = ^uint32(0)
	}
	info := ublksys.DevInfo{
		NrHwQueues:    uint16(c.Queues),
		QueueDepth:    uint16(c.Depth),
		MaxIOBufBytes: uint32(c.MaxIOBytes),
		DevID:         id,
		UblksrvPid:    -1,
		Flags:         uint64(want),
	}
	err := errors.New("not added")
	if zeroCopyWanted(&c, b, have) {
		zinfo := info
		zinfo.Flags |= uint64(zeroCopyFlags)
		if err = ctl.addDev(&zinfo); err == nil {
			info = zinfo
		}
	}
	// A kernel that refuses the zero-copy flags gets the copy path.
	if err != nil {
		if err := ctl.addDev(&info); err != nil {
			return nil, fmt.Errorf("create ublk device: %w", err)
		}
	}
	zc := Features(info.Flags)&zeroCopyFlags == zeroCopyFlags
	d := &Device{ctl: ctl, backend: b, cfg: c, info: info, size: b.Size(), done: make(chan struct{}), failed: make(chan struct{})}
	if err := missingError(want, Features(info.Flags)); err != nil {
		d.abort()
		return nil, fmt.Errorf("create ublk device %d: kernel dropped a flag: %w", info.DevID, err)
	}
	if !zc && Features(info.Flags)&FeatureAutoBufReg != 0 {
		d.abort()
		return nil, fmt.Errorf("create ublk device %d: kernel granted AUTO_BUF_REG without USER_COPY (flags %s)", info.DevID, Features(info.Flags))
	}
	p, err := c.params(b.Size(), int(info.MaxIOBufBytes), b, zc)
	if err == nil {
		err = ctl.setParams(d.ID(), p)
	}
	if err != nil {
		d.abort()
		return nil, fmt.Errorf("create ublk device %d: %w", d.ID(), err)
	}
	if err := d.startQueues(); err != nil {
		d.abort()
		return nil, fmt.Errorf("create ublk device %d: %w", d.ID(), err)
	}
	// START_DEV waits until every queue has fetched every tag.
	if err := ctl.simple(ublksys.UBLK_CMD_START_DEV, opStartDev, d.ID(), uint64(os.Getpid())); err != nil {
		d.abort()
		return nil, fmt.Errorf("create ublk device %d: %w", d.ID(), err)
	}
	return d, nil
}

// Recover re-attaches this process to device id, whose previous server has
// died (UBLK_F_USER_RECOVERY): it waits until the kernel has quiesced the
// device, starts the queues and lets the held I/O through. Requests the old
// server had not completed are reissued (UBLK_F_USER_RECOVERY_REISSUE), so b
// must hold the same data the old server's backend held. Only the queue
// count, depth and buffer size of the existing device are used; cfg may
// still choose RecoverTimeout.
func Recover(ctl *Control, id int, b Backend, cfg *Config) (*Device, error) {
	c := cfg.withDefaults()
	raw, err := ctl.rawInfo(id)
	if err != nil {
		return nil, fmt.Errorf("recover ublk device %d: %w", id, err)
	}
	flags := Features(raw.Flags)
	if flags&FeatureUserRecovery == 0 {
		return nil, fmt.Errorf("recover ublk device %d: it was created without user recovery", id)
	}
	p, err := ctl.getParams(id)
	if err != nil {
		return nil, fmt.Errorf("recover ublk device %d: %w", id, err)
	}
	if got, want := b.Size(), int64(p.Basic.DevSectors)<<9; got != want {
		return nil, fmt.Errorf("recover ublk device %d: backend size %d, device size %d", id, got, want)
	}
	c.Queues, c.Depth, c.MaxIOBytes = int(raw.NrHwQueues), int(raw.QueueDepth), int(raw.MaxIOBufBytes)
	c.UserCopy = flags&FeatureUserCopy != 0
	if flags&FeatureAutoBufReg != 0 && flags&zeroCopyFlags != zeroCopyFlags {
		return nil, fmt.Errorf("recover ublk device %d: it has AUTO_BUF_REG without USER_COPY (flags %s), which this server cannot serve", id, flags)
	}
	c.NoRecovery = false
	c.LogicalBlockSize = 1 << p.Basic.LogicalBsShift

	deadline := time.Now().Add(c.RecoverTimeout)
	for {
		err = ctl.simple(ublksys.UBLK_CMD_START_USER_RECOVERY, opStartRecovery, id, 0)
		if err == nil {
			break
		}
		// EBUSY: the old server still holds /dev/ublkcN or the kernel has not
		// finished quiescing; EINVAL: no queue was ever ready (never started).
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return nil, fmt.Errorf("recover ublk device %d: %w", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	d := &Device{ctl: ctl, backend: b, cfg: c, info: *raw, size: b.Size(), done: make(chan struct{}), failed: make(chan struct{})}
	if err := d.startQueues(); err != nil {
		d.abort()
		return nil, fmt.Errorf("recover ublk device %d: %w", id, err)
	}
	if err := ctl.simple(ublksys.UBLK_CMD_END_USER_RECOVERY, opEndRecovery, id, uint64(os.Getpid())); err != nil {
		d.abort()
		return nil, fmt.Errorf("recover ublk device %d: %w", id, err)
	}
	return d, nil
}

// ID returns the device id N.
func (d *Device) ID() int { return int(d.info.DevID) }

// BlockPath returns /dev/ublkbN.
func (d *Device) BlockPath() string { return fmt.Sprintf("/dev/ublkb%d", d.ID()) }

// CharPath returns /dev/ublkcN.
func (d *Device) CharPath() string { return fmt.Sprintf("/dev/ublkc%d", d.ID()) }

// Flags returns the feature flags the device runs with, as the kernel
// granted them.
func (d *Device) Flags() Features { return Features(d.info.Flags) }

// ZeroCopy reports whether the device runs with automatic buffer
// registration: planned reads go straight into the requests' pages.
func (d *Device) ZeroCopy() bool { return Features(d.info.Flags)&zeroCopyFlags == zeroCopyFlags }

// Queues and Depth return the negotiated queue count and depth.
func (d *Device) Queues() int { return int(d.info.NrHwQueues) }

// Depth returns the negotiated queue depth.
func (d *Device) Depth() int { return int(d.info.QueueDepth) }

// Done is closed when every queue has stopped serving: after Close, or when
// the device was stopped from outside (Control.Delete by another process).
func (d *Device) Done() <-chan struct{} { return d.done }

// Wait blocks until Done and returns the first queue error, if any.
func (d *Device) Wait() error {
	<-d.done
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.queueErr
}

// Run serves until ctx is done, then closes the device (see Close). It
// also returns when the device was stopped from outside (nil), and when a
// queue failed (an io_uring error, a rejected commit): then it returns the
// error and leaves the device as it is, so that the caller can exit and a
// new process can recover it; on a device without recovery, call Close.
func (d *Device) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return d.Close()
	case <-d.failed:
		return fmt.Errorf("ublk device %d: %w", d.ID(), d.queueError())
	case <-d.done:
		if err := d.queueError(); err != nil {
			return fmt.Errorf("ublk device %d: %w", d.ID(), err)
		}
		d.Close() // releases our side; the kernel device is already stopped
		return nil
	}
}

func (d *Device) queueError() error {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.queueErr
}

// Close stops the device (pending I/O is completed first), waits for the
// queues, and deletes /dev/ublkbN and /dev/ublkcN. It does not wait for
// processes that still hold /dev/ublkbN open (their I/O fails), except on
// kernels without DEL_DEV_ASYNC, where only the synchronous delete exists. Only devices this
// process serves are closed this way; see Control.Delete for orphans.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		stopErr := d.ctl.simple(ublksys.UBLK_CMD_STOP_DEV, opStopDev, d.ID(), 0)
		qerr := d.Wait()
		d.release()
		delErr := d.ctl.deleteDev(d.ID())
		d.closeErr = errors.Join(stopErr, qerr, delErr)
	})
	return d.closeErr
}

// abort undoes a half-created device.
func (d *Device) abort() {
	if d.cdev != nil || len(d.queues) > 0 {
		d.ctl.simple(ublksys.UBLK_CMD_STOP_DEV, opStopDev, d.ID(), 0)
		d.Wait()
	}
	d.release()
	d.ctl.deleteDev(d.ID())
}

func (d *Device) release() {
	for _, q := range d.queues {
		q.unmap()
	}
	if d.cdev != nil {
		d.cdev.Close()
		d.cdev = nil
	}
}

func (d *Device) setQueueErr(err error) {
	d.errMu.Lock()
	if d.queueErr == nil {
		d.queueErr = err
		close(d.failed)
	}
	d.errMu.Unlock()
}

// startQueues opens /dev/ublkcN and starts one goroutine per queue; it
// returns when every queue has submitted FETCH_REQ for all its tags.
func (d *Device) startQueues() error {
	var err error
	// devtmpfs creates the node as the device is added; allow udev a moment
	// where it manages /dev.
	for i := 0; ; i++ {
		d.cdev, err = os.OpenFile(d.CharPath(), os.O_RDWR, 0)
		if err == nil || !errors.Is(err, os.ErrNotExist) || i == 100 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		close(d.done)
		return fmt.Errorf("open %s: %w", d.CharPath(), err)
	}
	encoded := Features(d.info.Flags)&FeatureIoctlEncode != 0
	ready := make(chan error, d.info.NrHwQueues)
	for qid := range int(d.info.NrHwQueues) {
		q, err := newQueue(d, qid, encoded)
		if err != nil {
			for _, q := range d.queues {
				q.unmap()
			}
			d.queues = nil
			close(d.done)
			return err
		}
		d.queues = append(d.queues, q)
	}
	d.wg.Add(len(d.queues))
	for _, q := range d.queues {
		go q.run(ready)
	}
	go func() {
		d.wg.Wait()
		close(d.done)
	}()
	var first error
	for range d.queues {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	return first
}
