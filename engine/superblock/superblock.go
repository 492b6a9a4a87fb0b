package superblock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unicode/utf8"

	"github.com/fabraid/fabraid/engine/layout"
)

// On-disk constants. Changing any of them changes the format.
const (
	Magic = "FABRAIDv" // 8 bytes at offset 0 of each copy
	// Version is the format this build writes for new volumes. Version 3
	// adds owner-domain journaling (the member flag OwnerJournal); version
	// 2 adds the stripe journal (JournalOffset, JournalBytes). Older
	// volumes are still assembled and written back in their own version:
	// version 2 without owner-domain journaling, version 1 without a
	// journal.
	Version = 3
	// VersionFixedParity is version 3 with the owner-parity layout
	// (Geometry.FixedParity, flag FlagFixedParity): written only for
	// volumes that use it, so that builds that do not know the layout
	// refuse them rather than read data from parity positions.
	VersionFixedParity = 4
	// VersionJournal is the format with the stripe journal but without
	// owner-domain journaling.
	VersionJournal = 2
	// VersionNoJournal is the first format: no journal area.
	VersionNoJournal = 1

	CopySize    = 8192  // bytes per superblock copy
	CopyAOffset = 4096  // first copy; bytes 0..4095 are left alone (partition tables, md 1.2 habit)
	CopyBOffset = 12288 // second copy
	// MetaEnd is the first byte after both copies; the bitmap starts at or after it.
	MetaEnd = CopyBOffset + CopySize

	headerSize  = 256
	entrySize   = 64
	crcOffset   = CopySize - 4
	MaxMembers  = (crcOffset - headerSize) / entrySize // 123
	NameMax     = 64
	DomainMax   = 32
	SectorAlign = 4096
)

// Codec identifies the parity arithmetic.
type Codec uint32

// Codecs.
const (
	// CodecRS is klauspost/reedsolomon's default systematic Vandermonde
	// matrix over GF(2^8) (polynomial 0x11d).
	CodecRS Codec = 1
	// CodecXOR is m=1 plain XOR parity (reedsolomon WithFastOneParityMatrix).
	CodecXOR Codec = 2
)

// Role is a member slot's role in the volume.
type Role uint8

// Roles.
const (
	RoleActive     Role = 1 // in sync
	RoleFailed     Role = 2 // failed or missing; never read
	RoleSpare      Role = 3 // not part of the data layout
	RoleRebuilding Role = 4 // being rebuilt; valid below Checkpoint (and outside the bitmap if Resync)
)

func (r Role) String() string {
	switch r {
	case RoleActive:
		return "active"
	case RoleFailed:
		return "failed"
	case RoleSpare:
		return "spare"
	case RoleRebuilding:
		return "rebuilding"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// FailReason records why a member slot is failed. A member failed as
// missing or unreachable returns by itself when it is found again (a
// bitmap resync: Returns); for the other reasons it stays failed across
// assemblies and returns only by an explicit re-add or replace.
type FailReason uint8

// Fail reasons.
const (
	// FailUnrecorded: not failed, or failed by a build that did not record
	// reasons (the byte was reserved and zero).
	FailUnrecorded FailReason = 0
	FailAdmin      FailReason = 1 // failed by administrator request
	FailIO         FailReason = 2 // an I/O error on the member
	FailMissing    FailReason = 3 // absent when the volume was assembled
	// FailUnreachable: an I/O error while the device could not be reached
	// (its NVMe controller was not live, the block device had vanished,
	// or the error itself said so: ENOLINK, ENODEV, ENXIO, ESHUTDOWN):
	// its path was lost, not its data.
	FailUnreachable FailReason = 4
	// FailMax is the highest reason this build knows.
	FailMax = FailUnreachable
)

// Returns reports whether a member failed for this reason comes back by
// itself when its device is found again, with a resync of the regions
// dirty in the write-intent bitmap (a full rebuild when its own superblock
// says it was a full-rebuild target): the device was absent or
// unreachable, and what it holds was current when it left. After an
// admin request, an I/O error or an unrecorded reason it does not.
func (f FailReason) Returns() bool { return f == FailMissing || f == FailUnreachable }

func (f FailReason) String() string {
	switch f {
	case FailUnrecorded:
		return "unrecorded"
	case FailAdmin:
		return "admin"
	case FailIO:
		return "io-error"
	case FailMissing:
		return "missing"
	case FailUnreachable:
		return "unreachable"
	}
	return fmt.Sprintf("FailReason(%d)", uint8(f))
}

// Flag bits of a member table entry (byte 49).
const (
	memberResync       byte = 1 << 0
	memberOwnerJournal byte = 1 << 1 // version 3
)

// Flag bits of Superblock.Flags.
const (
	// FlagDomainOverride records that the volume was created although its
	// layout violates the failure-domain rule.
	FlagDomainOverride uint32 = 1 << 0
	// FlagFixedParity (version 4) records Geometry.FixedParity: parity on
	// every group's last M members in every row. Marshal sets it from the
	// geometry, Unmarshal sets the geometry from it.
	FlagFixedParity uint32 = 1 << 1
)

// Member is one entry of the member table.
type Member struct {
	UUID   [16]byte
	Domain string // failure domain (node), up to 32 bytes
	Role   Role
	// Resync marks a rebuilding member that only needs the regions dirty in
	// the write-intent bitmap (a returning member), not a full rebuild.
	Resync bool
	// Checkpoint is the first row (of every group) not yet rebuilt.
	Checkpoint int64
	// Failure is why a failed member failed (FailUnrecorded otherwise).
	Failure FailReason
	// OwnerJournal (version 3) marks a member of the owner's failure
	// domain whose data chunks are covered by the stripe journal: every
	// write to a stripe with a data chunk on it since the volume was last
	// consistent logged that chunk's post-write contents to a member in
	// another domain, so losing it at a crash tears nothing.
	OwnerJournal bool
}

// Superblock is the decoded metadata of one member.
type Superblock struct {
	// Version is the format version (1 to 4); zero means Version, or
	// VersionFixedParity for a Geometry.FixedParity volume.
	Version    uint32
	Flags      uint32
	VolumeUUID [16]byte
	Name       string
	Geometry   layout.Geometry
	Codec      Codec

	DataOffset   int64  // bytes; the data area is [DataOffset, DataOffset+Rows*ChunkSize)
	BitmapOffset int64  // bytes
	BitmapBytes  uint32 // bytes reserved for the write-intent bitmap
	RegionRows   int64  // rows per bitmap bit
	// JournalOffset and JournalBytes place the stripe journal (version 2;
	// zero: no journal). The area lies between the bitmap and the data.
	JournalOffset int64
	JournalBytes  int64

	Events uint64 // bumped on every metadata change
	Epoch  uint64 // owner epoch: bumped by every new owner
	Clean  bool   // stopped cleanly: parity matches data everywhere

	Slot       int      // this member's slot in Members
	MemberUUID [16]byte // equals Members[Slot].UUID
	CTime      int64    // creation time, Unix seconds (informational)

	Members []Member
}

// ErrInvalid is wrapped by every decoding and validation error.
var ErrInvalid = errors.New("invalid superblock")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// RegionCount is the number of write-intent bitmap bits in use.
func (sb *Superblock) RegionCount() int64 {
	return (sb.Geometry.Rows + sb.RegionRows - 1) / sb.RegionRows
}

// MinDeviceSize is the smallest member device that can hold this layout.
func (sb *Superblock) MinDeviceSize() int64 {
	return sb.DataOffset + sb.Geometry.MemberDataBytes()
}

// Validate checks the internal consistency of sb.
func (sb *Superblock) Validate() error {
	if err := sb.Geometry.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	g := sb.Geometry
	if sb.Codec != CodecRS && sb.Codec != CodecXOR {
		return invalid("unknown codec %d", sb.Codec)
	}
	if sb.Codec == CodecXOR && g.M != 1 {
		return invalid("xor codec with m=%d", g.M)
	}
	if len(sb.Name) > NameMax || !utf8.ValidString(sb.Name) || bytes.IndexByte([]byte(sb.Name), 0) >= 0 {
		return invalid("bad volume name %q", sb.Name)
	}
	if len(sb.Members) != g.Members() || len(sb.Members) > MaxMembers {
		return invalid("%d member entries for %d members (max %d)", len(sb.Members), g.Members(), MaxMembers)
	}
	if sb.Slot < 0 || sb.Slot >= len(sb.Members) {
		return invalid("slot %d out of range", sb.Slot)
	}
	if sb.Members[sb.Slot].UUID != sb.MemberUUID {
		return invalid("member uuid does not match table slot %d", sb.Slot)
	}
	seen := map[[16]byte]bool{}
	for i, m := range sb.Members {
		switch m.Role {
		case RoleActive, RoleFailed, RoleSpare, RoleRebuilding:
		default:
			return invalid("member %d: bad role %d", i, m.Role)
		}
		if seen[m.UUID] {
			return invalid("member %d: duplicate uuid", i)
		}
		seen[m.UUID] = true
		if len(m.Domain) > DomainMax || !utf8.ValidString(m.Domain) || bytes.IndexByte([]byte(m.Domain), 0) >= 0 {
			return invalid("member %d: bad domain %q", i, m.Domain)
		}
		if m.Checkpoint < 0 || m.Checkpoint > g.Rows {
			return invalid("member %d: checkpoint %d beyond %d rows", i, m.Checkpoint, g.Rows)
		}
		if m.Resync && m.Role != RoleRebuilding {
			return invalid("member %d: resync flag on %s member", i, m.Role)
		}
		if m.Failure > FailMax {
			return invalid("member %d: bad fail reason %d", i, m.Failure)
		}
		if m.Failure != FailUnrecorded && m.Role != RoleFailed {
			return invalid("member %d: fail reason %s on %s member", i, m.Failure, m.Role)
		}
		if m.OwnerJournal && (sb.version() < Version || sb.JournalBytes == 0) {
			return invalid("member %d: owner-journal flag without a version %d journal", i, Version)
		}
	}
	if sb.RegionRows < 1 {
		return invalid("region rows %d", sb.RegionRows)
	}
	if sb.BitmapOffset < MetaEnd || sb.BitmapOffset%SectorAlign != 0 {
		return invalid("bitmap offset %d", sb.BitmapOffset)
	}
	if sb.BitmapBytes > MaxBitmapBytes {
		return invalid("bitmap of %d bytes exceeds %d", sb.BitmapBytes, MaxBitmapBytes)
	}
	if int64(sb.BitmapBytes)%SectorAlign != 0 || int64(sb.BitmapBytes)*8 < sb.RegionCount() {
		return invalid("bitmap of %d bytes cannot hold %d regions", sb.BitmapBytes, sb.RegionCount())
	}
	if sb.DataOffset%SectorAlign != 0 || sb.DataOffset < sb.BitmapOffset+int64(sb.BitmapBytes) {
		return invalid("data offset %d overlaps metadata", sb.DataOffset)
	}
	if sb.DataOffset > (1<<62)-g.MemberDataBytes() {
		return invalid("data area overflows")
	}
	if sb.Geometry.FixedParity != (sb.version() == VersionFixedParity) {
		return invalid("fixed-parity layout %v in a version %d superblock: the layout is version %d's",
			sb.Geometry.FixedParity, sb.version(), VersionFixedParity)
	}
	switch sb.version() {
	case VersionNoJournal:
		if sb.JournalOffset != 0 || sb.JournalBytes != 0 {
			return invalid("journal area in a version 1 superblock")
		}
	case VersionJournal, Version, VersionFixedParity:
		if sb.JournalBytes == 0 && sb.JournalOffset == 0 {
			break
		}
		if sb.JournalBytes > MaxJournalBytes {
			return invalid("journal of %d bytes exceeds %d", sb.JournalBytes, MaxJournalBytes)
		}
		if sb.JournalOffset%SectorAlign != 0 || sb.JournalBytes%SectorAlign != 0 ||
			sb.JournalBytes < MinJournalBytes || sb.JournalOffset < sb.BitmapOffset+int64(sb.BitmapBytes) ||
			sb.JournalOffset > sb.DataOffset || sb.JournalBytes > sb.DataOffset-sb.JournalOffset {
			return invalid("journal area [%d, +%d) outside [bitmap end %d, data offset %d) or unaligned",
				sb.JournalOffset, sb.JournalBytes, sb.BitmapOffset+int64(sb.BitmapBytes), sb.DataOffset)
		}
	default:
		return invalid("format version %d", sb.Version)
	}
	return nil
}

// MinJournalBytes is the smallest journal area: two header blocks and one
// record block.
const MinJournalBytes = 3 * SectorAlign

// MaxBitmapBytes and MaxJournalBytes bound what assembly reads into memory
// from a member (the whole bitmap, the whole journal area), so a crafted
// or corrupt superblock cannot make it allocate gigabytes. Volumes this
// engine creates stay far below them: a bitmap of 16 MiB covers 128 Mi
// regions (8 EiB of member data at the default 64 MiB region), and the
// default journal holds 3 records of the largest size (m = 4 chunks of
// 1 MiB), about 13 MiB.
const (
	MaxBitmapBytes  = 16 << 20
	MaxJournalBytes = 64 << 20
)

// FormatVersion is the version sb is written in: its own, or for a new
// volume (Version zero) the newest format its layout needs.
func (sb *Superblock) FormatVersion() uint32 { return sb.version() }

func (sb *Superblock) version() uint32 {
	switch {
	case sb.Version != 0:
		return sb.Version
	case sb.Geometry.FixedParity:
		return VersionFixedParity
	}
	return Version
}

// Marshal encodes one superblock copy (CopySize bytes).
func (sb *Superblock) Marshal() ([]byte, error) {
	if err := sb.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, CopySize)
	le := binary.LittleEndian
	copy(b[0:8], Magic)
	le.PutUint32(b[8:], sb.version())
	flags := sb.Flags &^ FlagFixedParity
	if sb.Geometry.FixedParity {
		flags |= FlagFixedParity
	}
	le.PutUint32(b[12:], flags)
	copy(b[16:32], sb.VolumeUUID[:])
	copy(b[32:96], sb.Name)
	g := sb.Geometry
	le.PutUint32(b[96:], uint32(g.K))
	le.PutUint32(b[100:], uint32(g.M))
	le.PutUint32(b[104:], uint32(g.Groups))
	le.PutUint32(b[108:], uint32(g.ChunkSize))
	le.PutUint64(b[112:], uint64(g.Rows))
	le.PutUint32(b[120:], layout.BlockSize)
	le.PutUint32(b[124:], uint32(sb.Codec))
	le.PutUint64(b[128:], uint64(sb.DataOffset))
	le.PutUint64(b[136:], uint64(sb.BitmapOffset))
	le.PutUint32(b[144:], sb.BitmapBytes)
	le.PutUint64(b[152:], uint64(sb.RegionRows))
	le.PutUint64(b[160:], sb.Events)
	le.PutUint64(b[168:], sb.Epoch)
	if sb.Clean {
		le.PutUint32(b[176:], 1)
	} else {
		le.PutUint32(b[176:], 2)
	}
	le.PutUint32(b[180:], uint32(sb.Slot))
	copy(b[184:200], sb.MemberUUID[:])
	le.PutUint64(b[200:], uint64(sb.CTime))
	le.PutUint32(b[208:], uint32(len(sb.Members)))
	le.PutUint64(b[212:], uint64(sb.JournalOffset))
	le.PutUint64(b[220:], uint64(sb.JournalBytes))
	for i, m := range sb.Members {
		e := b[headerSize+i*entrySize : headerSize+(i+1)*entrySize]
		copy(e[0:16], m.UUID[:])
		copy(e[16:48], m.Domain)
		e[48] = byte(m.Role)
		if m.Resync {
			e[49] |= memberResync
		}
		if m.OwnerJournal {
			e[49] |= memberOwnerJournal
		}
		e[50] = byte(m.Failure)
		le.PutUint64(e[56:], uint64(m.Checkpoint))
	}
	le.PutUint32(b[crcOffset:], crc32.Checksum(b[:crcOffset], castagnoli))
	return b, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Unmarshal decodes and validates one superblock copy.
func Unmarshal(b []byte) (*Superblock, error) {
	if len(b) < CopySize {
		return nil, invalid("%d bytes, need %d", len(b), CopySize)
	}
	b = b[:CopySize]
	if string(b[0:8]) != Magic {
		return nil, invalid("no fabraid magic")
	}
	le := binary.LittleEndian
	if got, want := le.Uint32(b[crcOffset:]), crc32.Checksum(b[:crcOffset], castagnoli); got != want {
		return nil, invalid("crc32c %08x, computed %08x", got, want)
	}
	version := le.Uint32(b[8:])
	if version < VersionNoJournal || version > VersionFixedParity {
		return nil, invalid("format version %d, this build reads %d to %d", version, VersionNoJournal, VersionFixedParity)
	}
	if bs := le.Uint32(b[120:]); bs != layout.BlockSize {
		return nil, invalid("block size %d", bs)
	}
	sb := &Superblock{
		Version: version,
		Flags:   le.Uint32(b[12:]),
		Name:    cstring(b[32:96]),
		Geometry: layout.Geometry{
			K:         int(le.Uint32(b[96:]) & 0xffff),
			M:         int(le.Uint32(b[100:]) & 0xffff),
			Groups:    int(le.Uint32(b[104:]) & 0xffff),
			ChunkSize: int(le.Uint32(b[108:]) & 0x7fffffff),
			Rows:      int64(le.Uint64(b[112:]) & (1<<62 - 1)),
			// Validate checks the flag against the version.
			FixedParity: le.Uint32(b[12:])&FlagFixedParity != 0,
		},
		Codec:         Codec(le.Uint32(b[124:])),
		DataOffset:    int64(le.Uint64(b[128:]) & (1<<62 - 1)),
		BitmapOffset:  int64(le.Uint64(b[136:]) & (1<<62 - 1)),
		BitmapBytes:   le.Uint32(b[144:]),
		RegionRows:    int64(le.Uint64(b[152:]) & (1<<62 - 1)),
		Events:        le.Uint64(b[160:]),
		Epoch:         le.Uint64(b[168:]),
		Slot:          int(le.Uint32(b[180:]) & 0xffff),
		CTime:         int64(le.Uint64(b[200:])),
		JournalOffset: int64(le.Uint64(b[212:]) & (1<<62 - 1)),
		JournalBytes:  int64(le.Uint64(b[220:]) & (1<<62 - 1)),
	}
	// Reject values the masks above would have silently changed.
	for _, c := range []struct {
		name string
		raw  uint64
		got  uint64
	}{
		{"k", uint64(le.Uint32(b[96:])), uint64(sb.Geometry.K)},
		{"m", uint64(le.Uint32(b[100:])), uint64(sb.Geometry.M)},
		{"groups", uint64(le.Uint32(b[104:])), uint64(sb.Geometry.Groups)},
		{"chunk", uint64(le.Uint32(b[108:])), uint64(sb.Geometry.ChunkSize)},
		{"rows", le.Uint64(b[112:]), uint64(sb.Geometry.Rows)},
		{"data offset", le.Uint64(b[128:]), uint64(sb.DataOffset)},
		{"bitmap offset", le.Uint64(b[136:]), uint64(sb.BitmapOffset)},
		{"region rows", le.Uint64(b[152:]), uint64(sb.RegionRows)},
		{"slot", uint64(le.Uint32(b[180:])), uint64(sb.Slot)},
		{"journal offset", le.Uint64(b[212:]), uint64(sb.JournalOffset)},
		{"journal bytes", le.Uint64(b[220:]), uint64(sb.JournalBytes)},
	} {
		if c.raw != c.got {
			return nil, invalid("%s %d out of range", c.name, c.raw)
		}
	}
	copy(sb.VolumeUUID[:], b[16:32])
	copy(sb.MemberUUID[:], b[184:200])
	switch le.Uint32(b[176:]) {
	case 1:
		sb.Clean = true
	case 2:
	default:
		return nil, invalid("bad state %d", le.Uint32(b[176:]))
	}
	n := le.Uint32(b[208:])
	if n > MaxMembers {
		return nil, invalid("%d members, max %d", n, MaxMembers)
	}
	sb.Members = make([]Member, n)
	for i := range sb.Members {
		e := b[headerSize+i*entrySize : headerSize+(i+1)*entrySize]
		m := &sb.Members[i]
		copy(m.UUID[:], e[0:16])
		m.Domain = cstring(e[16:48])
		m.Role = Role(e[48])
		if e[49]&^(memberResync|memberOwnerJournal) != 0 {
			return nil, invalid("member %d: bad flags %d", i, e[49])
		}
		m.Resync = e[49]&memberResync != 0
		m.OwnerJournal = e[49]&memberOwnerJournal != 0
		m.Failure = FailReason(e[50])
		cp := le.Uint64(e[56:])
		if cp > 1<<62 {
			return nil, invalid("member %d: checkpoint out of range", i)
		}
		m.Checkpoint = int64(cp)
	}
	if err := sb.Validate(); err != nil {
		return nil, err
	}
	return sb, nil
}

// Newer reports whether a is a newer metadata version than b: the higher
// owner epoch first (a new owner's view beats anything a fenced, older owner
// wrote afterwards, however many events), then the higher event counter.
// It is the one order of superblock versions: of a member's two copies
// (ReadCopies), of the members at assembly, and of the drives the volume
// manager scans.
func Newer(a, b *Superblock) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch > b.Epoch
	}
	return a.Events > b.Events
}

// ReadCopies reads both copies from r and returns the newer valid one
// (Newer). It fails only when neither copy is valid; the error then names
// both reasons.
func ReadCopies(r io.ReaderAt) (*Superblock, error) {
	var best *Superblock
	var errs []error
	buf := make([]byte, CopySize)
	for i, off := range []int64{CopyAOffset, CopyBOffset} {
		if _, err := r.ReadAt(buf, off); err != nil {
			errs = append(errs, fmt.Errorf("copy %c at %d: %w", 'A'+i, off, err))
			continue
		}
		sb, err := Unmarshal(buf)
		if err != nil {
			errs = append(errs, fmt.Errorf("copy %c at %d: %w", 'A'+i, off, err))
			continue
		}
		if best == nil || Newer(sb, best) {
			best = sb
		}
	}
	if best == nil {
		return nil, errors.Join(errs...)
	}
	return best, nil
}

// Clone returns a deep copy of sb.
func (sb *Superblock) Clone() *Superblock {
	c := *sb
	c.Members = append([]Member(nil), sb.Members...)
	return &c
}
