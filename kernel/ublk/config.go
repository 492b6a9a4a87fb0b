package ublk

import (
	"fmt"
	"math/bits"
	"os"
	"time"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
)

// AnyID lets the kernel choose the device id.
const AnyID = -1

// Config describes a device to create. A nil *Config means all defaults.
type Config struct {
	// ID is the device id (/dev/ublkbID); AnyID lets the kernel pick. The
	// zero value asks for id 0.
	ID int
	// Queues is the number of hardware queues, each served by its own OS
	// thread and io_uring (default 1; the kernel caps it at the CPU count).
	Queues int
	// Depth is the number of requests in flight per queue (default 128).
	Depth int
	// MaxIOBytes is the largest request (default 512 KiB); each tag gets a
	// buffer of this size.
	MaxIOBytes int
	// LogicalBlockSize and PhysicalBlockSize default to 4096.
	LogicalBlockSize, PhysicalBlockSize int
	// IOMin and IOOpt are the preferred minimum and optimal request sizes
	// (the engine's chunk and full stripe). The kernel takes powers of two:
	// other values are rounded down. Default: the physical block size.
	IOMin, IOOpt int
	// NoRecovery creates a device without user recovery: when the server
	// dies, in-flight and new I/O fail and the block device goes away. By
	// default the device is created with UBLK_F_USER_RECOVERY and
	// UBLK_F_USER_RECOVERY_REISSUE, and Create fails on kernels without them.
	NoRecovery bool
	// UserCopy moves data with pread/pwrite on /dev/ublkcN
	// (UBLK_F_USER_COPY, Linux 6.5) instead of the kernel copying into
	// per-tag buffers.
	UserCopy bool
	// NoZeroCopy keeps the copy path on kernels with automatic buffer
	// registration. By default a device whose backend is a DirectReader is
	// created with UBLK_F_AUTO_BUF_REG and UBLK_F_USER_COPY where
	// GET_FEATURES reports both (Linux 6.16+): planned reads then go from
	// the members straight into the request's pages (IORING_OP_READ_FIXED
	// on the queue's ring), and every other request moves its data with
	// user copy (pread/pwrite of /dev/ublkcN). Elsewhere, and with this
	// set, the kernel copies between the request and per-tag buffers.
	NoZeroCopy bool
	// Async serves each request in its own goroutine instead of in the
	// queue thread, so one queue keeps many requests in flight in the
	// backend. Use it for backends that wait on devices (the engine volume);
	// for in-memory backends serving inline is faster. A lone request while
	// no worker is busy is served inline even in async mode.
	Async bool
	// RecoverTimeout bounds how long Recover waits for the old server to be
	// gone and the device quiesced (default 30 s).
	RecoverTimeout time.Duration
}

func (c *Config) withDefaults() Config {
	out := Config{ID: AnyID}
	if c != nil {
		out = *c
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&out.Queues, 1)
	def(&out.Depth, 128)
	def(&out.MaxIOBytes, 512<<10)
	def(&out.LogicalBlockSize, 4096)
	def(&out.PhysicalBlockSize, max(4096, out.LogicalBlockSize))
	def(&out.IOMin, out.PhysicalBlockSize)
	def(&out.IOOpt, out.PhysicalBlockSize)
	if out.RecoverTimeout <= 0 {
		out.RecoverTimeout = 30 * time.Second
	}
	return out
}

// zeroCopyFlags are the flags of a zero-copy device: AUTO_BUF_REG for the
// planned reads, USER_COPY for every other request, whose data the kernel
// no longer copies into per-tag buffers once buffers are registered.
const zeroCopyFlags = FeatureAutoBufReg | FeatureUserCopy

// zeroCopyWanted reports whether a device for b is created zero-copy: b
// plans reads (DirectReader), the kernel reports both zeroCopyFlags, and
// c does not turn it off.
func zeroCopyWanted(c *Config, b Backend, have Features) bool {
	_, direct := b.(DirectReader)
	return direct && !c.NoZeroCopy && have&zeroCopyFlags == zeroCopyFlags
}

func log2(n int) uint8 { return uint8(bits.Len(uint(n)) - 1) }

// params builds SET_PARAMS for a backend of size bytes. With zeroCopy the
// request buffers are aligned to the logical block size in memory too
// (UBLK_PARAM_TYPE_DMA_ALIGN), as O_DIRECT member reads into them require;
// the result is then sent whole (ParamsDMASize), else as Params only.
func (c *Config) params(size int64, maxIO int, b Backend, zeroCopy bool) (*ublksys.ParamsDMA, error) {
	lbs := c.LogicalBlockSize
	if lbs&(lbs-1) != 0 || lbs < 512 || lbs > os.Getpagesize() {
		return nil, fmt.Errorf("logical block size %d: must be a power of two from 512 to the page size", lbs)
	}
	if size <= 0 || size%int64(lbs) != 0 {
		return nil, fmt.Errorf("backend size %d: must be a positive multiple of the logical block size %d", size, lbs)
	}
	p := &ublksys.ParamsDMA{Params: ublksys.Params{
		Len:   uint32(ublksys.ParamsSize),
		Types: ublksys.UBLK_PARAM_TYPE_BASIC | ublksys.UBLK_PARAM_TYPE_DISCARD,
		Basic: ublksys.ParamBasic{
			Attrs:           ublksys.UBLK_ATTR_VOLATILE_CACHE | ublksys.UBLK_ATTR_FUA,
			LogicalBsShift:  log2(lbs),
			PhysicalBsShift: log2(c.PhysicalBlockSize),
			IOMinShift:      log2(c.IOMin),
			IOOptShift:      log2(c.IOOpt),
			MaxSectors:      uint32(maxIO >> 9),
			DevSectors:      uint64(size >> 9),
		},
		Discard: ublksys.ParamDiscard{
			DiscardGranularity:    uint32(lbs),
			MaxWriteZeroesSectors: uint32(maxIO >> 9),
		},
	}}
	if zeroCopy {
		p.Len = ublksys.ParamsDMASize
		p.Types |= ublksys.UBLK_PARAM_TYPE_DMA_ALIGN
		p.DMA.Alignment = uint32(lbs - 1)
	}
	if _, ok := b.(Discarder); ok {
		p.Discard.MaxDiscardSectors = uint32(maxIO >> 9)
		p.Discard.MaxDiscardSegments = 1
	}
	return p, nil
}
