package engine

// Creating a volume: geometry and layout decisions, the first superblocks,
// and the Volume value that Create and Assemble share.

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"

	"github.com/klauspost/reedsolomon"

	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
)

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
	return create(cfg, devs, names, opts, testHooks{})
}

func create(cfg Config, devs []Member, names []string, opts Options, h testHooks) (*Volume, error) {
	if cfg.Groups == 0 {
		cfg.Groups = 1
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.RegionSize == 0 {
		cfg.RegionSize = DefaultRegionSize
	}
	g := layout.Geometry{K: cfg.K, M: cfg.M, Groups: cfg.Groups, ChunkSize: cfg.ChunkSize, Rows: 1, FixedParity: cfg.FixedParity}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
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
	off, err := chooseDataOffset(cfg, g, size)
	if err != nil {
		return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
	}
	cfg.DataOffset = off
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
	if jmin := max(journalMinBytes(g), cfg.JournalBytes); limit-jmin >= defaultBitmapOffset+bitmapBlock {
		limit -= jmin
	}
	for defaultBitmapOffset+bitmapBytes() > limit {
		regionRows *= 2
	}
	// The journal takes the room between the bitmap and the data; it
	// needs at least one record of the largest size.
	journalOff := defaultBitmapOffset + bitmapBytes()
	journalBytes := cfg.DataOffset - journalOff
	if journalBytes < journalMinBytes(g) {
		log.Warn("no room for the stripe journal between bitmap and data: the write hole stays open while degraded",
			"volume", cfg.Name, "data_offset", cfg.DataOffset, "needed", journalOff+journalMinBytes(g))
		journalOff, journalBytes = 0, 0
	}
	codec := superblock.CodecRS
	if g.M == 1 {
		codec = superblock.CodecXOR
	}
	volUUID := cfg.UUID
	if volUUID == ([16]byte{}) {
		volUUID = newUUID()
	}
	sb := &superblock.Superblock{
		Flags: flags, VolumeUUID: volUUID, Name: cfg.Name, Geometry: g, Codec: codec,
		DataOffset: cfg.DataOffset, BitmapOffset: defaultBitmapOffset, BitmapBytes: uint32(bitmapBytes()),
		RegionRows: regionRows, Events: 1, Epoch: 0, Clean: true, CTime: cfg.CTime,
		JournalOffset: journalOff, JournalBytes: journalBytes,
	}
	sb.Version = sb.FormatVersion()
	for i := range devs {
		sb.Members = append(sb.Members, superblock.Member{UUID: newUUID(), Domain: cfg.Domains[i], Role: superblock.RoleActive})
	}
	sb.MemberUUID = sb.Members[0].UUID
	if err := sb.Validate(); err != nil {
		return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
	}
	v, err := newVolume(sb, devs, names, opts, h)
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
	if err := v.start(opts, cfg.AssumeZeroed); err != nil {
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
		if err := v.recordOwnerJournal(); err != nil {
			return nil, fmt.Errorf("create volume %q: %w", cfg.Name, err)
		}
	}
	v.startIdleCleaner(opts.IdleClean)
	return v, nil
}

func newVolume(sb *superblock.Superblock, devs []Member, names []string, opts Options, h testHooks) (*Volume, error) {
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
		done: make(chan struct{}), resyncDone: make(chan struct{}), hooks: h,
	}
	v.exec = &gatedExecutor{inner: exec, gate: &v.gate}
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
	if sb.JournalBytes > 0 && !h.journalOff {
		v.jrn = newJournal(v, sb)
	}
	v.markOwnerSlots(sb, opts.OwnerDomain)
	return v, nil
}

// start marks the volume open (dirty) under a new owner epoch. consistent
// says that every stripe's parity matches its data (no resync pending): only
// then may the owner's members be recorded as journal-covered
// (recordOwnerJournal does it later otherwise).
func (v *Volume) start(opts Options, consistent bool) error {
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
	for slot := range v.meta.Members {
		v.meta.Members[slot].OwnerJournal = consistent && v.slots[slot].owner
	}
	return v.writeMetaLocked()
}

// defaultDataOffset leaves room for the bitmap of a large member and a
// journal of memberSize/journalShare bytes (at most defaultJournalMax), and
// never fewer than DefaultJournalRecords records of the largest size,
// rounded up to DefaultDataOffset. Members below ~128 MiB keep the 1 MiB
// offset; a member of 1 GiB or more gets a journal of 8 MiB, which a
// forced retire (a flush and header write on every member, the writers
// waiting) empties 8 times less often than the minimal one.
func defaultDataOffset(g layout.Geometry, memberSize int64) int64 {
	journal := max(DefaultJournalRecords*maxRecordSize(g), min(memberSize/journalShare, defaultJournalMax))
	return journalDataOffset(journalHdrBlocks*journalBlock + journal)
}

// journalDataOffset is the smallest multiple of DefaultDataOffset (and at
// least DefaultDataOffset) that leaves the default bitmap room and a
// journal area of area bytes, header blocks included.
func journalDataOffset(area int64) int64 {
	need := int64(defaultBitmapOffset+defaultBitmapRoom) + area
	return max(DefaultDataOffset, (need+DefaultDataOffset-1)/DefaultDataOffset*DefaultDataOffset)
}

// journalMinBytes is the smallest journal area of geometry g: the header
// blocks and one record of the largest size.
func journalMinBytes(g layout.Geometry) int64 {
	return journalHdrBlocks*journalBlock + maxRecordSize(g)
}

// CheckJournalBytes reports whether Create would accept cfg.JournalBytes
// (with cfg.DataOffset) on members of memberSize bytes: a caller that
// hands the create to another node checks it first.
func CheckJournalBytes(cfg Config, memberSize int64) error {
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	g := layout.Geometry{K: cfg.K, M: cfg.M, Groups: max(1, cfg.Groups), ChunkSize: cfg.ChunkSize, Rows: 1}
	_, err := chooseDataOffset(cfg, g, memberSize)
	return err
}

// chooseDataOffset returns the data offset of a new volume on members of
// memberSize bytes: cfg.DataOffset when only it is given, the one
// cfg.JournalBytes derives when that is given (cfg.DataOffset, if also
// given, must equal it), defaultDataOffset otherwise.
func chooseDataOffset(cfg Config, g layout.Geometry, memberSize int64) (int64, error) {
	if cfg.JournalBytes == 0 {
		if cfg.DataOffset != 0 {
			return cfg.DataOffset, nil
		}
		return defaultDataOffset(g, memberSize), nil
	}
	if lo := journalMinBytes(g); cfg.JournalBytes < lo {
		return 0, fmt.Errorf("journal of %d bytes below the minimum of %d for %d+%d with %d KiB chunks (2 header blocks and one full-chunk record)",
			cfg.JournalBytes, lo, g.K, g.M, g.ChunkSize>>10)
	}
	if hi := min(MaxJournalBytes, memberSize/4); cfg.JournalBytes > hi {
		return 0, fmt.Errorf("journal of %d bytes above the maximum of %d (%d MiB, at most a quarter of a %d-byte member)",
			cfg.JournalBytes, hi, MaxJournalBytes>>20, memberSize)
	}
	off := journalDataOffset(cfg.JournalBytes)
	if cfg.DataOffset != 0 && cfg.DataOffset != off {
		return 0, fmt.Errorf("data offset %d disagrees with a journal of %d bytes, which needs data offset %d (give one of them)",
			cfg.DataOffset, cfg.JournalBytes, off)
	}
	return off, nil
}
