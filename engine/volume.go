package engine

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/reedsolomon"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

// Defaults.
const (
	// DefaultChunkSize is chosen from the measurements in
	// docs/performance.md: see "Choice of chunk size" there.
	DefaultChunkSize = 64 << 10
	// DefaultRegionSize is the member data covered by one bitmap bit.
	DefaultRegionSize = 64 << 20
	// DefaultDataOffset leaves room for both superblock copies and up to
	// ~8 million bitmap bits.
	DefaultDataOffset   = 1 << 20
	defaultBitmapOffset = 32 << 10
	// defaultBitmapRoom is the bitmap room a default data offset leaves:
	// 16 KiB, 131072 regions (8 TiB of member data at 64 MiB regions).
	defaultBitmapRoom = 16 << 10
	// DefaultJournalRecords is how many records of the largest size (a
	// full chunk of m positions) the default data offset leaves room for.
	DefaultJournalRecords = 3
	// journalShare and defaultJournalMax size the default journal: a
	// 1/128 share of a member, at most 8 MiB (assembly reads the whole
	// area of every member).
	journalShare      = 128
	defaultJournalMax = 8 << 20
	lockShards        = 4096
	// MaxJournalBytes bounds Config.JournalBytes: assembly reads the
	// whole area of every member, and the area a request derives (the
	// data offset rounded up to DefaultDataOffset) must stay within what
	// a superblock accepts (superblock.MaxJournalBytes).
	MaxJournalBytes = superblock.MaxJournalBytes - 2*DefaultDataOffset
)

// Errors.
var (
	// ErrVolumeFailed: more than m members of a group failed; the volume
	// returns this error for every request rather than wrong data.
	ErrVolumeFailed = errors.New("volume failed: more than m members of a group lost")
	// ErrFenced: another owner assembled the volume with a newer epoch;
	// this Volume stopped writing metadata and serving requests.
	ErrFenced = errors.New("volume fenced: a newer owner epoch is on the members")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("volume closed")
	// ErrTooManyFailures is returned for a stripe that cannot be served.
	ErrTooManyFailures = layout.ErrTooManyFailures
)

// Config describes a new volume.
type Config struct {
	Name string
	// UUID is the volume UUID to record; zero: a random one (the cluster
	// chooses it before the owner creates the volume, so the record in
	// etcd and the superblocks agree).
	UUID      [16]byte
	K, M      int
	Groups    int      // default 1
	ChunkSize int      // default DefaultChunkSize
	Domains   []string // failure domain of every member slot; default: one domain per member
	// AllowDomainViolation creates the volume even when a group puts more
	// than M members in one domain (logged as a warning and recorded).
	AllowDomainViolation bool
	RegionSize           int64 // member data bytes per bitmap bit; default DefaultRegionSize
	DataOffset           int64 // default: defaultDataOffset, or the one JournalBytes derives
	// JournalBytes is the stripe journal area wanted between bitmap and
	// data (header blocks included); 0: the default share of a member.
	// The data offset becomes the smallest multiple of DefaultDataOffset
	// that leaves at least this much; from journalMinBytes(g) to
	// min(MaxJournalBytes, a quarter of the member).
	JournalBytes int64
	// FixedParity selects the owner-parity layout (layout.Geometry's):
	// every group's last M members hold its parity in every row. With the
	// owner's members there (Domains), owner-domain journaling has nothing
	// to log while the owner runs the volume.
	FixedParity bool
	// MemberSize limits the space used on each member (default: the
	// smallest member).
	MemberSize int64
	CTime      int64 // recorded creation time (Unix seconds)
	// AssumeZeroed skips the initial parity sync: the caller guarantees
	// every member's data area reads as zeroes (fresh files, drives after
	// a deterministic-zero discard), and zeroes are consistent parity.
	AssumeZeroed bool
}

// Options tune a running volume; the zero value is usable.
type Options struct {
	Executor Executor     // default SyncExecutor
	Logger   *slog.Logger // default slog.Default()
	// Epoch is the owner epoch of this assembly. Zero means "one more than
	// the newest on disk"; a value lower than the disk's is refused (a
	// stale owner).
	Epoch uint64
	// RefuseUnsafeStart makes assembly refuse a volume that stopped
	// uncleanly while degraded with writes possibly in flight (the write
	// hole, docs/engine.md), as md does without --force. By default such
	// a volume starts and Status().WriteHoleStripes counts the stripes
	// whose parity could not be recomputed.
	RefuseUnsafeStart bool
	// SyncResync makes assembly after an unclean stop recompute the
	// parity of every dirty region before it returns (the behaviour
	// before the background resync). By default assembly returns as soon
	// as the journal is replayed and the resync runs in the background
	// (Status().Progress kind "resync", Status().ResyncRegions); writes to
	// rows it has not reached resync them first.
	SyncResync bool
	// Resync throttles the background resync (Rate, YieldDelay,
	// Workers); the zero value yields to foreground I/O.
	Resync RebuildOptions
	// OwnerDomain is the failure domain (node) of the engine's own
	// members: the ones that die with it. When set, every write to a
	// stripe with a data chunk on one of them journals that chunk's
	// post-write contents to a member of another domain first
	// (owner-domain journaling, docs/engine.md), so that a new owner can
	// repair the stripes this one was writing when it died with its
	// members. It applies to format version 3 volumes, in groups where the
	// domain holds at most m members; empty (the default) turns it off,
	// as for a one-node volume, which dies with its node as a whole.
	OwnerDomain string
	// IdleClean, when positive, cleans the write-intent bitmap of a
	// volume that stays idle: every IdleClean, if no write completed
	// since the previous tick and bits are set, the members are flushed
	// and the regions idle for a whole tick are cleared (the clean of
	// Flush; md's bitmap daemon_sleep). Bits then clear within two ticks
	// of the last write even when the consumer never flushes, so a crash
	// or a member's return resyncs only what was written since. Zero
	// (the default) cleans at consumer flushes only.
	IdleClean time.Duration
}

// Volume is an assembled fabraid volume: k+m parity over member devices.
// It implements io.ReaderAt and io.WriterAt on a block-aligned address
// space of Size() bytes and is safe for concurrent use; concurrent requests
// proceed in parallel, serialised only per stripe.
type Volume struct {
	geo   layout.Geometry
	enc   reedsolomon.Encoder
	exec  Executor
	log   *slog.Logger
	names []string // by slot; guarded by metaMu
	slots []slotState
	base  *superblock.Superblock // immutable fields

	dataOff int64
	locks   [lockShards]sync.RWMutex
	bufs    sync.Pool
	ops     sync.Pool // *stripeOp
	runBufs sync.Pool // *[]byte: a rebuild run's chunks (tryRebuildRun)

	zeroOnce sync.Once
	zero     []byte // shared read-only zeroes for WriteZeroes
	bm       *writeIntent

	// inflight counts foreground requests while background (a rebuild
	// or scrub) runs, so that it can yield; without background work the
	// shared counter is left alone to keep its cache line quiet.
	inflight   atomic.Int64
	foreground atomic.Int64 // foreground requests begun while background work runs (RebuildOptions.BusyRate)
	background atomic.Bool
	writeHole  atomic.Int64 // stripes left inconsistent by an unclean degraded stop
	// failGen counts member failures; a write that sees it change while it
	// ran flushes its group before it completes (see execWrite).
	failGen atomic.Int64
	// recordedGen is failGen as of the last metadata write that
	// succeeded: every failure counted up to it is on the survivors'
	// superblocks.
	recordedGen atomic.Int64
	// retireFailed: a member was marked failed under metaMu; unlockMeta
	// retires the journal.
	retireFailed atomic.Bool
	epoch        atomic.Uint64 // owner epoch of this assembly (journal records carry it)
	jrn          *journal      // nil: no journal (version 1 volume, or too little room)
	// ownerSlots counts the slots covered by owner-domain journaling
	// (slotState.owner); fixed at assembly.
	ownerSlots int
	// crashJcp[slot] is, after an unclean stop, the first row at which
	// the slot's chunks were not durably in sync when the volume stopped
	// (0 failed, checkpoint rebuilding, rows active): below it, a write
	// was not journaled. Nil outside Assemble.
	crashJcp []int64
	failed   atomic.Bool
	fenced   atomic.Bool
	closed   atomic.Bool
	// handedOff: HandOff gave the frozen volume's requests back (until a Thaw).
	handedOff atomic.Bool

	metaMu sync.Mutex // guards meta and metadata writes; never taken under bm.mu by I/O
	meta   *superblock.Superblock
	// lastStatus is the last Status snapshot (returned, marked Stale, by
	// Status while the volume is frozen with metaMu held).
	lastStatus atomic.Pointer[Status]

	rebuildMu sync.Mutex    // one rebuild/scrub/resync at a time
	done      chan struct{} // closed by Close or Abandon: background work stops
	stopOnce  sync.Once
	// rs is the resync after an unclean stop while it runs in the
	// background (nil otherwise); resyncWG waits for its goroutine.
	rs         atomic.Pointer[resyncState]
	resyncWG   sync.WaitGroup
	cleanerWG  sync.WaitGroup // the idle cleaner (Options.IdleClean)
	resyncDone chan struct{}  // closed when no background resync runs
	hooks      testHooks      // tests only; see hooks.go
	progress   atomic.Pointer[Progress]
	// lastRebuild is the progress of the last rebuild when it ended
	// (finished, stopped or failed), with its final Bytes.
	lastRebuild atomic.Pointer[Progress]

	stats ioCounters
	gate  freezeGate // Freeze and Thaw (freeze.go): every member I/O passes it

	faults faults // re-introduced bugs (tests only); see faults.go
}

type slotState struct {
	dev        atomic.Pointer[memberRef] // nil when missing
	role       atomic.Uint32
	checkpoint atomic.Int64
	resync     atomic.Pointer[bitset] // regions to resync for a returning member
	// jcp is the first row at which the slot's chunk is not durably
	// readable: what an assembly after a crash would read from the
	// superblock on disk (rows if active, the persisted checkpoint if
	// rebuilding, 0 if failed). It only grows after a metadata write.
	// Writes to rows at or above it are journaled.
	jcp atomic.Int64
	// owner: the member is in Options.OwnerDomain (it dies with this
	// engine) and owner-domain journaling covers it. Fixed at assembly.
	owner bool
}

// durableRows is the jcp of a member table entry.
func durableRows(m superblock.Member, rows int64) int64 {
	switch m.Role {
	case superblock.RoleActive:
		return rows
	case superblock.RoleRebuilding:
		return m.Checkpoint
	}
	return 0
}

type memberRef struct{ Member }

// dev returns the member in slot, or nil.
func (v *Volume) dev(slot int) Member {
	if r := v.slots[slot].dev.Load(); r != nil {
		return r.Member
	}
	return nil
}

func (v *Volume) slotRole(slot int) superblock.Role {
	return superblock.Role(v.slots[slot].role.Load())
}

// Geometry returns the volume's geometry.
func (v *Volume) Geometry() layout.Geometry { return v.geo }

// Size returns the usable size in bytes.
func (v *Volume) Size() int64 { return v.geo.Size() }

// BlockSize is the logical block size; requests must be aligned to it.
func (v *Volume) BlockSize() int { return layout.BlockSize }

// UUID returns the volume UUID.
func (v *Volume) UUID() [16]byte { return v.base.VolumeUUID }

// Name returns the volume name.
func (v *Volume) Name() string { return v.base.Name }

func (v *Volume) getBuf() *[]byte { return v.bufs.Get().(*[]byte) }

func (v *Volume) putBuf(b *[]byte) { v.bufs.Put(b) }

func (v *Volume) lockFor(stripe int64) *sync.RWMutex { return &v.locks[lockShard(stripe)] }

// lockShard is the index in Volume.locks of stripe's lock.
func lockShard(stripe int64) int { return int(uint64(stripe) * 0x9E3779B97F4A7C15 >> 52 % lockShards) }

// writable reports whether slot receives writes (active or rebuilding).
func (v *Volume) writable(slot int) bool {
	r := v.slotRole(slot)
	return v.dev(slot) != nil && (r == superblock.RoleActive || r == superblock.RoleRebuilding)
}

// readable reports whether slot holds valid data at row.
func (v *Volume) readable(slot int, row int64) bool {
	s := &v.slots[slot]
	switch superblock.Role(s.role.Load()) {
	case superblock.RoleActive:
		return true
	case superblock.RoleRebuilding:
		if row < s.checkpoint.Load() {
			return true
		}
		if rs := s.resync.Load(); rs != nil {
			return !rs.test(row / v.bm.regionRows)
		}
	}
	return false
}

// unreadableMask returns the stripe positions of (group,row) that cannot
// be read (the read fast path needs nothing else).
func (v *Volume) unreadableMask(group int, row int64) (unreadable uint64) {
	w := v.geo.Width()
	first := v.geo.MemberOf(row, 0) // geo.MemberOf(row, pos), without a division per position
	base := group * w
	for pos := 0; pos < w; pos++ {
		mem := first + pos
		if mem >= w {
			mem -= w
		}
		if !v.readable(base+mem, row) {
			unreadable |= 1 << uint(pos)
		}
	}
	return unreadable
}

// masks returns the stripe positions of (group,row) that cannot be read and
// those that cannot be written.
func (v *Volume) masks(group int, row int64) (unreadable, unwritable uint64) {
	for pos := 0; pos < v.geo.Width(); pos++ {
		slot := v.geo.Slot(group, v.geo.MemberOf(row, pos))
		if !v.readable(slot, row) {
			unreadable |= 1 << uint(pos)
		}
		if !v.writable(slot) {
			unwritable |= 1 << uint(pos)
		}
	}
	return unreadable, unwritable
}

// allInSync reports whether every non-spare slot is active.
func (v *Volume) allInSync() bool {
	for slot := range v.slots {
		r := v.slotRole(slot)
		if r != superblock.RoleActive && r != superblock.RoleSpare {
			return false
		}
	}
	return true
}

func (v *Volume) check() error {
	if v.closed.Load() {
		return ErrClosed
	}
	return v.stopErr()
}
