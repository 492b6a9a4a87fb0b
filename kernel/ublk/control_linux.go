//go:build linux

package ublk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
	"github.com/fabraid/fabraid/kernel/uring"
	"golang.org/x/sys/unix"
)

// ControlPath is the ublk control device.
const ControlPath = "/dev/ublk-control"

// Control operation names, used in error messages.
const (
	opGetFeatures   = "get features"
	opAddDev        = "add device"
	opDelDev        = "delete device"
	opStartDev      = "start device"
	opStopDev       = "stop device"
	opSetParams     = "set parameters"
	opGetParams     = "get parameters"
	opGetDevInfo    = "get device info"
	opStartRecovery = "start user recovery"
	opEndRecovery   = "end user recovery"
)

// Control is an open /dev/ublk-control with its own io_uring (128-byte SQEs).
// It is safe for concurrent use; commands are serialized.
type Control struct {
	mu       sync.Mutex
	f        *os.File
	ring     *uring.Ring
	features Features
	encoded  bool // send ioctl-encoded command numbers
	// buf carries command payloads. The kernel reads and writes them from
	// an io-wq worker after io_uring_enter returned, so they must not live
	// on a goroutine stack (which moves when it grows): this is heap memory,
	// which Go does not move.
	buf *[512]byte
}

// OpenControl opens the ublk control device and asks the kernel for its
// features. A missing device or a kernel that is too old gives an error
// wrapping ErrNotSupported that says what is needed.
func OpenControl() (*Control, error) {
	f, err := os.OpenFile(ControlPath, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open %s: %w (%s)", ControlPath, ErrNotSupported, missingModuleHint())
		}
		return nil, fmt.Errorf("open %s: %w", ControlPath, err)
	}
	ring, err := uring.New(4, &uring.Config{SQE128: true})
	if err != nil {
		f.Close()
		if errors.Is(err, uring.ErrNotSupported) {
			return nil, fmt.Errorf("ublk control ring: %w: %w", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("ublk control ring: %w", err)
	}
	c := &Control{f: f, ring: ring, encoded: true, buf: new([512]byte)}
	var feat uint64
	err = c.cmdBuf(ublksys.UBLK_CMD_GET_FEATURES, opGetFeatures, ^uint32(0), unsafe.Pointer(&feat), ublksys.UBLK_FEATURES_LEN)
	switch {
	case err == nil:
		c.features = Features(feat)
		c.encoded = c.features&FeatureIoctlEncode != 0
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL):
		// Before 6.5 there is no GET_FEATURES; such kernels take the legacy
		// command numbers. Features stay unknown (0).
		c.encoded = false
	default:
		c.Close()
		return nil, err
	}
	return c, nil
}

// missingModuleHint says whether ublk_drv just is not loaded or the running
// kernel does not have it at all.
func missingModuleHint() string {
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		rel := unix.ByteSliceToString(u.Release[:])
		dir := "/lib/modules/" + rel
		if _, err := os.Stat(dir + "/kernel/drivers"); err == nil {
			found, _ := filepath.Glob(dir + "/kernel/drivers/block/ublk_drv.ko*")
			builtin, _ := os.ReadFile(dir + "/modules.builtin")
			if len(found) == 0 && !strings.Contains(string(builtin), "ublk_drv") {
				return "kernel " + rel + " has no ublk_drv module: requires a kernel built with CONFIG_BLK_DEV_UBLK, Linux >= 6.0"
			}
		}
	}
	return "requires the ublk_drv module: modprobe ublk_drv; a kernel with CONFIG_BLK_DEV_UBLK, Linux >= 6.0"
}

// Close releases the control device.
func (c *Control) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring != nil {
		c.ring.Close()
		c.ring = nil
	}
	if c.f != nil {
		err := c.f.Close()
		c.f = nil
		return err
	}
	return nil
}

// Features returns what GET_FEATURES reported (0 on kernels before 6.5, which
// lack the command).
func (c *Control) Features() Features { return c.features }

// cmdBuf sends a control command for device id whose payload is the n
// bytes at p: they are copied to the kernel-visible buffer and back.
func (c *Control) cmdBuf(nr uint32, op string, id uint32, p unsafe.Pointer, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > len(c.buf) {
		return fmt.Errorf("ublk %s: payload of %d bytes too large", op, n)
	}
	data := unsafe.Slice((*byte)(p), n)
	copy(c.buf[:], data)
	err := c.cmdLocked(nr, op, &ublksys.CtrlCmd{
		DevID: id, QueueID: ^uint16(0), Len: uint16(n), Addr: uint64(uintptr(unsafe.Pointer(&c.buf[0]))),
	})
	copy(data, c.buf[:n])
	return err
}

// cmd sends one control command without payload and waits for it.
func (c *Control) cmd(nr uint32, op string, hdr *ublksys.CtrlCmd) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmdLocked(nr, op, hdr)
}

func (c *Control) cmdLocked(nr uint32, op string, hdr *ublksys.CtrlCmd) error {
	if c.ring == nil {
		return fmt.Errorf("ublk %s: control closed", op)
	}
	code, ok := ublksys.EncodeCtrl(nr, c.encoded)
	if !ok {
		return fmt.Errorf("ublk %s: %w (requires a kernel with ioctl-encoded ublk commands, Linux >= 6.3)", op, ErrNotSupported)
	}
	sqe, err := c.ring.NextSQE()
	if err != nil {
		return fmt.Errorf("ublk %s: %w", op, err)
	}
	sqe.PrepURingCmd(int(c.f.Fd()), code, uint64(nr))
	*(*ublksys.CtrlCmd)(sqe.CmdArea()) = *hdr
	cqe, err := c.ring.WaitCQE()
	if err != nil {
		return fmt.Errorf("ublk %s: %w", op, err)
	}
	if err := cqe.Err(); err != nil {
		if hdr.DevID != ^uint32(0) {
			return fmt.Errorf("ublk %s for device %d: %w", op, hdr.DevID, err)
		}
		return fmt.Errorf("ublk %s: %w", op, err)
	}
	return nil
}

// DevInfo describes an existing ublk device.
type DevInfo struct {
	ID         int
	Queues     int
	Depth      int
	State      State
	MaxIOBytes int
	PID        int // server process, -1 when none
	Flags      Features
}

// State is a ublk device state.
type State uint16

// Device states.
const (
	StateDead     State = ublksys.UBLK_S_DEV_DEAD     // added, not started (or stopped)
	StateLive     State = ublksys.UBLK_S_DEV_LIVE     // serving I/O
	StateQuiesced State = ublksys.UBLK_S_DEV_QUIESCED // server gone, waiting for recovery
)

func (s State) String() string {
	switch s {
	case StateDead:
		return "dead"
	case StateLive:
		return "live"
	case StateQuiesced:
		return "quiesced"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

func devInfoFrom(i *ublksys.DevInfo) *DevInfo {
	return &DevInfo{
		ID: int(i.DevID), Queues: int(i.NrHwQueues), Depth: int(i.QueueDepth), State: State(i.State),
		MaxIOBytes: int(i.MaxIOBufBytes), PID: int(i.UblksrvPid), Flags: Features(i.Flags),
	}
}

// Info returns the state of device id (GET_DEV_INFO).
func (c *Control) Info(id int) (*DevInfo, error) {
	raw, err := c.rawInfo(id)
	if err != nil {
		return nil, err
	}
	return devInfoFrom(raw), nil
}

func (c *Control) rawInfo(id int) (*ublksys.DevInfo, error) {
	var info ublksys.DevInfo
	err := c.cmdBuf(ublksys.UBLK_CMD_GET_DEV_INFO, opGetDevInfo, uint32(id), unsafe.Pointer(&info), int(unsafe.Sizeof(info)))
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("%w: %w", err, os.ErrNotExist)
		}
		return nil, err
	}
	return &info, nil
}

func (c *Control) addDev(info *ublksys.DevInfo) error {
	err := c.cmdBuf(ublksys.UBLK_CMD_ADD_DEV, opAddDev, info.DevID, unsafe.Pointer(info), int(unsafe.Sizeof(*info)))
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%w (ublk id %d is in use)", err, info.DevID)
	}
	return err
}

// setParams sends p.Len bytes of p: Params alone, or with the DMA
// alignment (ParamsDMASize) on a zero-copy device.
func (c *Control) setParams(id int, p *ublksys.ParamsDMA) error {
	return c.cmdBuf(ublksys.UBLK_CMD_SET_PARAMS, opSetParams, uint32(id), unsafe.Pointer(p), int(p.Len))
}

func (c *Control) getParams(id int) (*ublksys.Params, error) {
	p := &ublksys.Params{Len: uint32(unsafe.Sizeof(ublksys.Params{}))}
	err := c.cmdBuf(ublksys.UBLK_CMD_GET_PARAMS, opGetParams, uint32(id), unsafe.Pointer(p), int(unsafe.Sizeof(*p)))
	return p, err
}

func (c *Control) simple(nr uint32, op string, id int, data uint64) error {
	return c.cmd(nr, op, &ublksys.CtrlCmd{DevID: uint32(id), QueueID: ^uint16(0), Data: [1]uint64{data}})
}

// Delete stops device id if it is live or quiesced and removes it. It is
// the cleanup for a device whose server is gone for good (for example after
// SIGKILL of a server without recovery, or when recovery is abandoned).
// Deleting a device that does not exist returns an error matching
// os.ErrNotExist.
func (c *Control) Delete(id int) error {
	if err := c.simple(ublksys.UBLK_CMD_STOP_DEV, opStopDev, id, 0); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("%w: %w", err, os.ErrNotExist)
		}
		return err
	}
	return c.deleteDev(id)
}

// deleteDev removes /dev/ublkcN (DEL_DEV). Where the kernel has it
// (it is in the 6.12 headers; added upstream in 2024), the asynchronous form is used: the
// synchronous one waits until every opener of /dev/ublkbN has closed it,
// which would hang a shutdown behind a consumer that keeps the device open.
// The nodes go away at once either way; with the asynchronous form the id is
// reusable only after the last opener is gone.
func (c *Control) deleteDev(id int) error {
	if c.encoded {
		err := c.simple(ublksys.UBLK_CMD_DEL_DEV_ASYNC, opDelDev, id, 0)
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	return c.simple(ublksys.UBLK_CMD_DEL_DEV, opDelDev, id, 0)
}

// List returns the ids of the ublk devices present (from /dev/ublkc*).
func List() ([]int, error) {
	paths, err := filepath.Glob("/dev/ublkc*")
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, p := range paths {
		if n, err := strconv.Atoi(strings.TrimPrefix(p, "/dev/ublkc")); err == nil {
			ids = append(ids, n)
		}
	}
	sort.Ints(ids)
	return ids, nil
}

// HaveFeatures reports whether the running kernel offers ublk with every
// flag in want: nil if it does, an error wrapping ErrNotSupported that names
// what is missing if not, any other error if the probe could not tell. It
// asks the kernel (GET_FEATURES, Linux 6.5); on older kernels, where the
// command does not exist, only the presence of ublk is checked.
func HaveFeatures(want Features) error {
	ctl, err := OpenControl()
	if err != nil {
		return err
	}
	defer ctl.Close()
	if have := ctl.Features(); have != 0 {
		return missingError(want, have)
	}
	return nil
}

// TryAdd adds a device with one queue of depth 1 and the given flags,
// deletes it again and returns the flags the kernel granted, or ADD_DEV's
// error: it tells which flag combinations a kernel accepts (zero copy's
// did change between releases) without serving anything.
func (c *Control) TryAdd(flags Features) (Features, error) {
	info := ublksys.DevInfo{NrHwQueues: 1, QueueDepth: 1, MaxIOBufBytes: 64 << 10, DevID: ^uint32(0), UblksrvPid: -1, Flags: uint64(flags)}
	if err := c.addDev(&info); err != nil {
		return 0, err
	}
	if err := c.deleteDev(int(info.DevID)); err != nil {
		return Features(info.Flags), fmt.Errorf("delete probe device %d: %w", info.DevID, err)
	}
	return Features(info.Flags), nil
}
