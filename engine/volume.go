package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	lockShards            = 4096
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
	Name      string
	K, M      int
	Groups    int      // default 1
	ChunkSize int      // default DefaultChunkSize
	Domains   []string // failure domain of every member slot; default: one domain per member
	// AllowDomainViolation creates the volume even when a group puts more
	// than M members in one domain (logged as a warning and recorded).
	AllowDomainViolation bool
	RegionSize           int64 // member data bytes per bitmap bit; default DefaultRegionSize
	DataOffset           int64 // default DefaultDataOffset
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

	// resyncGate, when set, holds the background resync until it is
	// closed (tests: assembly returns before the resync ran).
	resyncGate <-chan struct{}
	// skipDemandResync makes writes skip the resync of a row the
	// background resync has not reached (a deliberate bug: the model test
	// must catch it).
	skipDemandResync bool
	// journalOff runs a version 2 volume without its stripe journal (the
	// write hole is open again); for tests that show what the journal
	// prevents.
	journalOff bool
	// beforeJournalDone, when set, runs after a journaled write's data
	// and parity writes, right before its record leaves the journal's
	// in-flight set (tests: a member failure in that window).
	beforeJournalDone func(stripe int64)
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

	zeroOnce sync.Once
	zero     []byte // shared read-only zeroes for WriteZeroes
	bm       *writeIntent

	// inflight counts foreground requests while background (a rebuild
	// or scrub) runs, so that it can yield; without background work the
	// shared counter is left alone to keep its cache line quiet.
	inflight   atomic.Int64
	background atomic.Bool
	writeHole  atomic.Int64 // stripes left inconsistent by an unclean degraded stop
	// failGen counts member failures; a write that sees it change while it
	// ran flushes its group before it completes (see execWrite).
	failGen atomic.Int64
	// retireFailed: a member was marked failed under metaMu; unlockMeta
	// retires the journal.
	retireFailed atomic.Bool
	epoch        atomic.Uint64 // owner epoch of this assembly (journal records carry it)
	jrn          *journal      // nil: no journal (version 1 volume, or too little room)
	// crashJcp[slot] is, after an unclean stop, the first row at which
	// the slot's chunks were not durably in sync when the volume stopped
	// (0 failed, checkpoint rebuilding, rows active): below it, a write
	// was not journaled. Nil outside Assemble.
	crashJcp []int64
	failed   atomic.Bool
	fenced   atomic.Bool
	closed   atomic.Bool

	metaMu sync.Mutex // guards meta and metadata writes; never taken under bm.mu by I/O
	meta   *superblock.Superblock

	rebuildMu sync.Mutex    // one rebuild/scrub/resync at a time
	done      chan struct{} // closed by Close or Abandon: background work stops
	stopOnce  sync.Once
	// rs is the resync after an unclean stop while it runs in the
	// background (nil otherwise); resyncWG waits for its goroutine.
	rs                atomic.Pointer[resyncState]
	resyncWG          sync.WaitGroup
	resyncDone        chan struct{} // closed when no background resync runs
	skipDemandResync  bool
	beforeJournalDone func(stripe int64)
	progress          atomic.Pointer[Progress]

	stats ioCounters

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

func newUUID() [16]byte {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func newEncoder(g layout.Geometry, c superblock.Codec) (reedsolomon.Encoder, error) {
	opts := []reedsolomon.Option{reedsolomon.WithMaxGoroutines(1)}
	if g.K > 10 && g.ChunkSize >= 64<<10 {
		// Above k=10 the single-goroutine path drops from GFNI to AVX2
		// (kernel-facts section 7).
		opts = []reedsolomon.Option{reedsolomon.WithMaxGoroutines(2)}
	}
	if c == superblock.CodecXOR {
		opts = append(opts, reedsolomon.WithFastOneParityMatrix())
	}
	opts = append(opts, fastestSIMD()...)
	enc, err := reedsolomon.New(g.K, g.M, opts...)
	if err != nil {
		return nil, fmt.Errorf("parity codec k=%d m=%d: %w", g.K, g.M, err)
	}
	return enc, nil
}

// Create writes a new volume onto devs (one per member slot, group by
// group) and returns it open. Unless cfg.AssumeZeroed, it first makes
// parity consistent with whatever the members hold (reads every data chunk,
// writes every parity chunk), as md's initial resync does.
func Create(cfg Config, devs []Member, names []string, opts Options) (*Volume, error) {
	if cfg.Groups == 0 {
		cfg.Groups = 1
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.RegionSize == 0 {
		cfg.RegionSize = DefaultRegionSize
	}
	g := layout.Geometry{K: cfg.K, M: cfg.M, Groups: cfg.Groups, ChunkSize: cfg.ChunkSize, Rows: 1}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
	}
	if cfg.DataOffset == 0 {
		// Room for the bitmap of a large member and a journal of
		// DefaultJournalRecords records of the largest size.
		need := int64(defaultBitmapOffset + defaultBitmapRoom + journalHdrBlocks*journalBlock +
			DefaultJournalRecords*maxRecordSize(g))
		cfg.DataOffset = max(DefaultDataOffset, (need+DefaultDataOffset-1)/DefaultDataOffset*DefaultDataOffset)
	}
	if len(devs) != g.Members() {
		return nil, fmt.Errorf("create volume %q: %d devices for %d members", cfg.Name, len(devs), g.Members())
	}
	if names == nil {
		names = make([]string, len(devs))
		for i := range names {
			names[i] = fmt.Sprintf("member%d", i)
		}
	}
	if cfg.Domains == nil {
		cfg.Domains = make([]string, len(devs))
		for i := range cfg.Domains {
			cfg.Domains[i] = fmt.Sprintf("member%d", i)
		}
	}
	if len(names) != len(devs) || len(cfg.Domains) != len(devs) {
		return nil, fmt.Errorf("create volume %q: %d devices, %d names, %d domains", cfg.Name, len(devs), len(names), len(cfg.Domains))
	}
	if cfg.DataOffset%superblock.SectorAlign != 0 || cfg.DataOffset < defaultBitmapOffset+bitmapBlock {
		return nil, fmt.Errorf("create volume %q: data offset %d must be 4 KiB aligned and at least %d",
			cfg.Name, cfg.DataOffset, defaultBitmapOffset+bitmapBlock)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var flags uint32
	if err := layout.CheckDomains(g, cfg.Domains); err != nil {
		if !cfg.AllowDomainViolation {
			return nil, fmt.Errorf("create volume %q: %w (override with AllowDomainViolation)", cfg.Name, err)
		}
		log.Warn("creating volume despite failure-domain violation", "volume", cfg.Name, "err", err)
		flags |= superblock.FlagDomainOverride
	}
	size := cfg.MemberSize
	for i, d := range devs {
		s, err := d.Size()
		if err != nil {
			return nil, fmt.Errorf("create volume %q: device %s: %w", cfg.Name, names[i], err)
		}
		if size == 0 || s < size {
			size = s
		}
	}
	g.Rows = (size - cfg.DataOffset) / int64(cfg.ChunkSize)
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("create volume %q: members of %d bytes too small: %w", cfg.Name, size, err)
	}
	regionRows := max(1, cfg.RegionSize/int64(cfg.ChunkSize))
	bitmapBytes := func() int64 {
		n := (g.Rows + regionRows - 1) / regionRows
		return ((n+7)/8 + bitmapBlock - 1) / bitmapBlock * bitmapBlock
	}
	// Coarser regions keep the bitmap small enough to leave room for the
	// journal (when the data offset allows one at all).
	limit := cfg.DataOffset
	if jmin := journalHdrBlocks*journalBlock + maxRecordSize(g); limit-jmin >= defaultBitmapOffset+bitmapBlock {
		limit -= jmin
	}
	for defaultBitmapOffset+bitmapBytes() > limit {
		regionRows *= 2
	}
	// The journal takes the room between the bitmap and the data; it
	// needs at least one record of the largest size.
	journalOff := defaultBitmapOffset + bitmapBytes()
	journalBytes := cfg.DataOffset - journalOff
	if journalBytes < journalHdrBlocks*journalBlock+maxRecordSize(g) {
		log.Warn("no room for the stripe journal between bitmap and data: the write hole stays open while degraded",
			"volume", cfg.Name, "data_offset", cfg.DataOffset, "needed", journalOff+journalHdrBlocks*journalBlock+maxRecordSize(g))
		journalOff, journalBytes = 0, 0
	}
	codec := superblock.CodecRS
	if g.M == 1 {
		codec = superblock.CodecXOR
	}
	sb := &superblock.Superblock{
		Flags: flags, VolumeUUID: newUUID(), Name: cfg.Name, Geometry: g, Codec: codec,
		DataOffset: cfg.DataOffset, BitmapOffset: defaultBitmapOffset, BitmapBytes: uint32(bitmapBytes()),
		RegionRows: regionRows, Events: 1, Epoch: 0, Clean: true, CTime: cfg.CTime,
		Version: superblock.Version, JournalOffset: journalOff, JournalBytes: journalBytes,
	}
	for i := range devs {
		sb.Members = append(sb.Members, superblock.Member{UUID: newUUID(), Domain: cfg.Domains[i], Role: superblock.RoleActive})
	}
	sb.MemberUUID = sb.Members[0].UUID
	if err := sb.Validate(); err != nil {
		return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
	}
	v, err := newVolume(sb, devs, names, opts)
	if err != nil {
		return nil, err
	}
	// Write the (all-zero) bitmap and the superblocks.
	zero := make([]byte, bitmapBlock)
	for blk := 0; blk < int(sb.BitmapBytes)/bitmapBlock; blk++ {
		if err := v.persistBitmap(blk, zero); err != nil {
			return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
		}
	}
	if v.jrn != nil {
		if err := v.jrn.reset(); err != nil {
			return nil, fmt.Errorf("create volume %q: journal: %w", cfg.Name, err)
		}
	}
	v.metaMu.Lock()
	err = v.writeMetaLocked()
	v.unlockMeta()
	if err != nil {
		return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
	}
	if err := v.start(opts); err != nil {
		return nil, err
	}
	if !cfg.AssumeZeroed {
		all := newBitset(sb.RegionCount())
		for r := int64(0); r < sb.RegionCount(); r++ {
			all.set(r)
		}
		if err := v.resyncParity(context.Background(), all, nil); err != nil {
			return nil, fmt.Errorf("create volume %q: initial sync: %w", cfg.Name, err)
		}
	}
	return v, nil
}

func newVolume(sb *superblock.Superblock, devs []Member, names []string, opts Options) (*Volume, error) {
	g := sb.Geometry
	enc, err := newEncoder(g, sb.Codec)
	if err != nil {
		return nil, err
	}
	exec := opts.Executor
	if exec == nil {
		exec = SyncExecutor{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	v := &Volume{
		geo: g, enc: enc, exec: exec, log: log.With("volume", sb.Name),
		names: names, slots: make([]slotState, g.Members()),
		base: sb.Clone(), meta: sb.Clone(), dataOff: sb.DataOffset,
		done: make(chan struct{}), resyncDone: make(chan struct{}), skipDemandResync: opts.skipDemandResync,
		beforeJournalDone: opts.beforeJournalDone,
	}
	chunk := g.ChunkSize
	v.bufs.New = func() any { b := AlignedBuffer(chunk); return &b }
	for i, m := range sb.Members {
		if devs[i] != nil {
			v.slots[i].dev.Store(&memberRef{devs[i]})
		}
		v.slots[i].role.Store(uint32(m.Role))
		v.slots[i].checkpoint.Store(m.Checkpoint)
		v.slots[i].jcp.Store(durableRows(m, g.Rows))
	}
	v.bm = newWriteIntent(sb.RegionRows, g.Rows, nil, v.persistBitmap)
	if sb.JournalBytes > 0 && !opts.journalOff {
		v.jrn = newJournal(v, sb)
	}
	return v, nil
}

// start marks the volume open (dirty) under a new owner epoch.
func (v *Volume) start(opts Options) error {
	v.metaMu.Lock()
	defer v.unlockMeta()
	if opts.Epoch != 0 && opts.Epoch < v.meta.Epoch {
		return fmt.Errorf("%w: owner epoch %d older than on-disk epoch %d (stale owner)", ErrAssembly, opts.Epoch, v.meta.Epoch)
	}
	if opts.Epoch != 0 {
		v.meta.Epoch = opts.Epoch
	} else {
		v.meta.Epoch++
	}
	v.meta.Clean = false
	v.epoch.Store(v.meta.Epoch)
	return v.writeMetaLocked()
}

func (v *Volume) getBuf() *[]byte  { return v.bufs.Get().(*[]byte) }
func (v *Volume) putBuf(b *[]byte) { v.bufs.Put(b) }

func (v *Volume) lockFor(stripe int64) *sync.RWMutex {
	return &v.locks[uint64(stripe)*0x9E3779B97F4A7C15>>52%lockShards]
}

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
	first := int(row % int64(w))
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

// writeMasks is masks plus the positions whose chunk is not durably
// readable (jcp): a crash now would leave them unreadable at assembly, so
// a write must journal them.
func (v *Volume) writeMasks(group int, row int64) (unreadable, unwritable, journal uint64) {
	for pos := 0; pos < v.geo.Width(); pos++ {
		slot := v.geo.Slot(group, v.geo.MemberOf(row, pos))
		bit := uint64(1) << uint(pos)
		if !v.readable(slot, row) {
			unreadable |= bit
			journal |= bit
		}
		if !v.writable(slot) {
			unwritable |= bit
		}
		if row >= v.slots[slot].jcp.Load() {
			journal |= bit
		}
	}
	return unreadable, unwritable, journal
}

// writeMetaLocked bumps the event counter and writes both superblock
// copies to every writable member: copy A everywhere, flush, copy B
// everywhere, flush. A member that fails is marked failed and the write is
// repeated without it. Callers hold metaMu.
func (v *Volume) writeMetaLocked() error {
	if err := v.checkFencedLocked(); err != nil {
		return err
	}
	for attempt := 0; attempt <= len(v.slots); attempt++ {
		v.meta.Events++
		var failedSlot = -1
		var failErr error
		for _, off := range []int64{superblock.CopyAOffset, superblock.CopyBOffset} {
			var ios []IO
			var slots []int
			for slot := range v.slots {
				d := v.dev(slot)
				if d == nil || !v.writable(slot) {
					continue
				}
				sb := v.meta.Clone()
				sb.Slot, sb.MemberUUID = slot, sb.Members[slot].UUID
				b, err := sb.Marshal()
				if err != nil {
					return fmt.Errorf("encode superblock: %w", err)
				}
				ios = append(ios, IO{Dev: d, Write: true, Buf: b, Off: off})
				slots = append(slots, slot)
			}
			v.writeDurable(ios)
			for i := range ios {
				if ios[i].Err != nil && failedSlot < 0 {
					failedSlot, failErr = slots[i], ios[i].Err
				}
			}
			if failedSlot >= 0 {
				break
			}
		}
		if failedSlot < 0 {
			// The roles and checkpoints written are what an assembly
			// after a crash reads: from now on, rows below them need no
			// journal.
			for slot := range v.slots {
				v.slots[slot].jcp.Store(durableRows(v.meta.Members[slot], v.geo.Rows))
			}
			return nil
		}
		v.stats.memberErrors.Add(1)
		v.markFailedLocked(failedSlot, fmt.Errorf("superblock write: %w", failErr))
	}
	return fmt.Errorf("superblock write: %w", ErrVolumeFailed)
}

// checkFencedLocked reads the superblocks on the members before they are
// rewritten: if a newer owner epoch is there, another owner has taken the
// volume over, and this one must not write anything again (the storage
// fence should already have cut it off; this is the backstop).
func (v *Volume) checkFencedLocked() error {
	if v.fenced.Load() {
		return ErrFenced
	}
	for slot := range v.slots {
		d := v.dev(slot)
		if d == nil || !v.writable(slot) {
			continue
		}
		sb, err := superblock.ReadCopies(d)
		if err != nil {
			continue // an unreadable member fails on the write that follows
		}
		if sb.VolumeUUID == v.base.VolumeUUID && sb.Epoch > v.meta.Epoch {
			v.fenced.Store(true)
			v.log.Error("fenced: a newer owner has the volume", "our_epoch", v.meta.Epoch,
				"disk_epoch", sb.Epoch, "device", v.names[slot])
			return ErrFenced
		}
	}
	return nil
}

// markFailedLocked records slot as failed (reason FailIO) in memory;
// callers hold metaMu and write the metadata afterwards.
func (v *Volume) markFailedLocked(slot int, cause error) {
	if v.slotRole(slot) == superblock.RoleFailed {
		return
	}
	v.log.Error("member failed", "slot", slot, "device", v.names[slot], "err", cause)
	v.failGen.Add(1)
	v.retireFailed.Store(true)
	v.slots[slot].jcp.Store(0)
	v.slots[slot].role.Store(uint32(superblock.RoleFailed))
	v.slots[slot].resync.Store(nil)
	v.slots[slot].checkpoint.Store(0)
	m := &v.meta.Members[slot]
	m.Role, m.Resync, m.Checkpoint, m.Failure = superblock.RoleFailed, false, 0, superblock.FailIO
	g := v.geo
	grp := slot / g.Width()
	lost := 0
	for mem := 0; mem < g.Width(); mem++ {
		if v.slotRole(g.Slot(grp, mem)) != superblock.RoleActive {
			lost++
		}
	}
	if lost > g.M {
		// Rebuilding members may still hold enough rows, but from here
		// on we refuse rather than risk serving a stripe wrongly.
		if !v.failed.Swap(true) {
			v.log.Error("volume failed", "group", grp, "lost", lost, "m", g.M)
		}
	}
}

// failMemberDev marks slot failed after an I/O error on dev (nil: any
// member), updates the survivors' superblocks and bumps the event
// counter. It does nothing
// when slot no longer holds dev (the member was replaced meanwhile). It
// returns nil when the failure is recorded on the survivors' superblocks
// (by this call or by the one that marked the slot failed first), and an
// error when it could not be (the metadata write failed, the volume is
// fenced or failed): a request that saw the member fail must not be
// acknowledged then, since an assembly after a crash would trust the
// member's stale chunks.
func (v *Volume) failMemberDev(slot int, dev Member, cause error) error {
	v.metaMu.Lock()
	defer v.unlockMeta()
	if dev != nil {
		v.stats.memberErrors.Add(1)
	}
	if v.slotRole(slot) == superblock.RoleFailed || (dev != nil && v.dev(slot) != dev) {
		// A failed metadata write leaves the volume fenced or failed.
		return v.stopErr()
	}
	v.markFailedLocked(slot, cause)
	if err := v.writeMetaLocked(); err != nil {
		v.log.Error("cannot record member failure", "slot", slot, "err", err)
		return fmt.Errorf("record failure of slot %d: %w", slot, err)
	}
	return nil
}

// unlockMeta releases metaMu. If a member was marked failed meanwhile (by
// failMemberDev, or by any metadata write or rebuild flush that found it
// failed), the journal is retired: writes that completed before the
// failure are durable now (the metadata write recording it flushed every
// member), and their records, which lack the failed member's chunk, must
// not survive to an assembly, which would take their stripes for write
// holes. Callers that may have marked a member failed release metaMu with
// it; retiring needs metaMu free (lock order).
func (v *Volume) unlockMeta() {
	v.metaMu.Unlock()
	if v.retireFailed.Swap(false) && v.jrn != nil {
		v.jrn.retireSoon()
	}
}

// persistBitmap writes bitmap block blk to every writable member and
// flushes them. A failing member is marked failed; the bit is durable on
// the survivors.
func (v *Volume) persistBitmap(blk int, data []byte) error {
	return v.syncWritable("bitmap write", nil, data, v.base.BitmapOffset+int64(blk)*bitmapBlock)
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

// Flush makes every write that completed before the call durable on the
// members (the block layer's FLUSH; a FUA write is WriteAtFUA). It then
// lazily cleans write-intent regions that stayed idle for a whole flush
// interval.
func (v *Volume) Flush() error {
	t0 := time.Now()
	err := v.flush()
	v.stats.flush.done(t0, 0, err)
	return err
}

func (v *Volume) flush() error {
	if err := v.check(); err != nil {
		return err
	}
	var idle []int64
	if v.allInSync() && v.bm.cleanMu.TryLock() {
		// One clean session at a time; a concurrent Flush only flushes.
		defer v.bm.cleanMu.Unlock()
		idle = v.bm.idleCandidates()
		if rs := v.rs.Load(); rs != nil {
			// Regions the background resync has not finished keep
			// their bits: their parity is not trusted yet.
			idle = slices.DeleteFunc(idle, rs.pendingRegion)
		}
	}
	var err error
	if v.jrn != nil {
		err = v.jrn.retire()
	} else {
		err = v.flushMembers()
	}
	if err != nil {
		return err
	}
	if len(idle) > 0 && v.allInSync() {
		if err := v.bm.clear(idle); err != nil {
			return fmt.Errorf("flush: clean bitmap: %w", err)
		}
	}
	return nil
}

// flushMembers flushes every writable member as one Executor batch (in
// parallel with a parallel or io_uring Executor); failures mark members
// failed. It fails when a failure could not be recorded or the volume
// failed or is fenced.
func (v *Volume) flushMembers() error {
	if err := v.flushWritable(nil); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

func (v *Volume) check() error {
	if v.closed.Load() {
		return ErrClosed
	}
	return v.stopErr()
}

// Close flushes, cleans the write-intent bitmap, marks the volume clean on
// every member and closes the members. Requests must have completed.
func (v *Volume) Close() error {
	if v.closed.Swap(true) {
		return ErrClosed
	}
	// Stop a running rebuild, scrub or resync (a rebuild checkpoints)
	// and wait for it.
	v.stopBackground()
	v.rebuildMu.Lock()
	v.rebuildMu.Unlock() //nolint:staticcheck // waiting for the holder is the point
	// A resync that did not finish leaves the volume dirty with its bits
	// set, so that the next assembly resyncs again.
	resyncPending := v.rs.Load() != nil
	var err error
	if !v.failed.Load() {
		if v.jrn != nil {
			err = v.jrn.retire()
		} else {
			err = v.flushMembers()
		}
		if err == nil && v.allInSync() && !resyncPending {
			v.bm.cleanMu.Lock()
			v.bm.idleCandidates() // forget the write history: nothing is in flight
			err = v.bm.clear(v.bm.allSet())
			v.bm.cleanMu.Unlock()
		}
		if err == nil && !resyncPending {
			v.metaMu.Lock()
			// Every write completed and was flushed: parity is consistent
			// everywhere. Bits left set (while degraded) only serve the
			// resync of members that return.
			v.meta.Clean = true
			err = v.writeMetaLocked()
			v.unlockMeta()
		}
	}
	for slot := range v.slots {
		if d := v.dev(slot); d != nil {
			if cerr := d.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("close volume %s: %w", v.base.Name, err)
	}
	return nil
}

// Abandon stops the volume without flushing or marking it clean, as a
// crash would; members are not closed. For tests and fencing.
// A background resync is stopped first (its row in progress completes),
// so that nothing writes to the members after Abandon returns.
func (v *Volume) Abandon() {
	v.closed.Store(true)
	v.stopBackground()
}

// stopBackground tells background work to stop and waits for the
// background resync goroutine.
func (v *Volume) stopBackground() {
	v.stopOnce.Do(func() { close(v.done) })
	v.resyncWG.Wait()
}

// MemberStatus describes one member slot.
type MemberStatus struct {
	Slot       int
	Device     string
	Domain     string
	Role       superblock.Role
	Resync     bool
	Checkpoint int64 // rows rebuilt so far (Rebuilding)
	// Failure is why a failed member failed; unless FailMissing (back by
	// itself at an assembly that finds it) it stays failed until ReAdd or
	// Replace.
	Failure superblock.FailReason
}

// Status is a snapshot of the volume's state.
type Status struct {
	Name          string
	UUID          [16]byte
	Size          int64
	Geometry      layout.Geometry
	Events, Epoch uint64
	Failed        bool
	Degraded      bool
	DirtyRegions  int64
	// WriteHoleStripes counts stripes that were dirty at an unclean stop
	// while degraded: their parity could not be recomputed, so the chunks
	// reconstructed there may be wrong (docs/engine.md, "write hole").
	WriteHoleStripes int64
	// Journal reports whether the stripe journal protects degraded writes
	// (format version 2 with a journal area).
	Journal bool
	// JournalRecords counts the records written since assembly (one per
	// write to a stripe with a data chunk that is not durably readable);
	// JournalReplayed the records replayed by assembly.
	JournalRecords, JournalReplayed int64
	// ResyncRegions counts the regions dirty at an unclean stop whose
	// parity the background resync has not finished (0 when none); the
	// resync itself shows as Progress kind "resync" while it runs.
	ResyncRegions int64
	Members       []MemberStatus
	Progress      *Progress // current rebuild, resync or scrub, if any
}

// Status returns a snapshot of the volume's state.
func (v *Volume) Status() Status {
	v.metaMu.Lock()
	defer v.metaMu.Unlock()
	st := Status{
		Name: v.base.Name, UUID: v.base.VolumeUUID, Size: v.Size(), Geometry: v.geo,
		Events: v.meta.Events, Epoch: v.meta.Epoch, Failed: v.failed.Load(),
		Degraded: !v.allInSync(), DirtyRegions: v.bm.snapshot().count(), Progress: v.progress.Load(),
		WriteHoleStripes: v.writeHole.Load(),
	}
	if rs := v.rs.Load(); rs != nil {
		st.ResyncRegions = rs.remaining()
	}
	if v.jrn != nil {
		st.Journal = true
		st.JournalRecords, st.JournalReplayed = v.jrn.records.Load(), v.jrn.replayed.Load()
	}
	for slot := range v.slots {
		st.Members = append(st.Members, MemberStatus{
			Slot: slot, Device: v.names[slot], Domain: v.meta.Members[slot].Domain, Role: v.slotRole(slot),
			Resync: v.slots[slot].resync.Load() != nil, Checkpoint: v.slots[slot].checkpoint.Load(),
			Failure: v.meta.Members[slot].Failure,
		})
	}
	return st
}
