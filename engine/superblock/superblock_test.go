package superblock

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine/layout"
)

func sample() *Superblock {
	g := layout.Geometry{K: 4, M: 2, Groups: 2, ChunkSize: 64 << 10, Rows: 1000}
	sb := &Superblock{
		Version:       Version,
		JournalOffset: 36864,
		JournalBytes:  512 << 10,
		VolumeUUID:    [16]byte{1, 2, 3},
		Name:          "vol0",
		Geometry:      g,
		Codec:         CodecRS,
		DataOffset:    1 << 20,
		BitmapOffset:  32768,
		BitmapBytes:   4096,
		RegionRows:    16,
		Events:        7,
		Epoch:         3,
		Clean:         true,
		Slot:          5,
		CTime:         1700000000,
	}
	for i := 0; i < g.Members(); i++ {
		sb.Members = append(sb.Members, Member{UUID: [16]byte{9, byte(i)}, Domain: "node" + string(rune('a'+i%6)), Role: RoleActive})
	}
	sb.Members[3].Role = RoleRebuilding
	sb.Members[3].Resync = true
	sb.Members[3].Checkpoint = 12
	sb.Members[4].Role = RoleFailed
	sb.Members[4].Failure = FailAdmin
	sb.MemberUUID = sb.Members[5].UUID
	return sb
}

// Every format round-trips: version 3 with owner-journal flags, version 2
// (journal, no owner-domain journaling) and version 1 (no journal), each
// decoding and re-encoding as itself.
func TestRoundTrip(t *testing.T) {
	v3 := sample()
	v3.Members[0].OwnerJournal, v3.Members[3].OwnerJournal = true, true
	v2 := sample()
	v2.Version = VersionJournal
	v1 := sample()
	v1.Version, v1.JournalOffset, v1.JournalBytes = VersionNoJournal, 0, 0
	v4 := sample()
	v4.Version, v4.Geometry.FixedParity, v4.Flags = VersionFixedParity, true, FlagFixedParity
	v4.Members[4].OwnerJournal = true
	for _, sb := range []*Superblock{sample(), v3, v2, v1, v4} {
		b, err := sb.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sb, got) {
			t.Fatalf("round trip:\nwant %+v\n got %+v", sb, got)
		}
	}
	b, err := v3.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if e := b[headerSize+3*entrySize:]; e[49] != memberResync|memberOwnerJournal {
		t.Fatalf("member 3 flags byte %#x, want resync|owner-journal", e[49])
	}
	// An older build's copy is refused by version, and a version 2 copy
	// with the owner-journal bit set is garbage.
	b2, err := v2.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b2[headerSize+49] |= memberOwnerJournal
	sealCRC(b2)
	if _, err := Unmarshal(b2); err == nil || !strings.Contains(err.Error(), "owner-journal") {
		t.Fatalf("version 2 copy with the owner-journal flag: %v", err)
	}
	v1.Version = Version
	if _, err := v1.Marshal(); err != nil {
		t.Fatalf("version 3 without journal: %v", err)
	}
	// The layout flag comes from the geometry on the way out and sets it
	// on the way in; a version 3 copy with the flag is refused (a build
	// that reads version 3 only would read data from parity positions).
	b4, err := v4.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if f := b4[12]; uint32(f)&FlagFixedParity == 0 {
		t.Fatalf("version 4 flags %#x without the fixed-parity flag", f)
	}
	b4[8] = Version
	sealCRC(b4)
	if _, err := Unmarshal(b4); err == nil || !strings.Contains(err.Error(), "fixed-parity") {
		t.Fatalf("version 3 copy with the fixed-parity flag: %v", err)
	}
}

func TestCorruptionDetected(t *testing.T) {
	b, err := sample().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 9, 100, 300, crcOffset, crcOffset + 3} {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := Unmarshal(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("flip byte %d: err %v", i, err)
		}
	}
	if _, err := Unmarshal(b[:100]); !errors.Is(err, ErrInvalid) {
		t.Errorf("truncated: %v", err)
	}
}

func TestValidateRefuses(t *testing.T) {
	for name, mut := range map[string]func(*Superblock){
		"slot":                    func(sb *Superblock) { sb.Slot = 99 },
		"uuid":                    func(sb *Superblock) { sb.MemberUUID[0] ^= 1 },
		"dupuuid":                 func(sb *Superblock) { sb.Members[1].UUID = sb.Members[0].UUID },
		"members":                 func(sb *Superblock) { sb.Members = sb.Members[:3]; sb.Slot = 0; sb.MemberUUID = sb.Members[0].UUID },
		"bitmap":                  func(sb *Superblock) { sb.BitmapBytes = 0 },
		"overlap":                 func(sb *Superblock) { sb.DataOffset = 32768 },
		"role":                    func(sb *Superblock) { sb.Members[0].Role = 9 },
		"checkpoint":              func(sb *Superblock) { sb.Members[0].Checkpoint = 5000 },
		"resync":                  func(sb *Superblock) { sb.Members[0].Resync = true },
		"codec":                   func(sb *Superblock) { sb.Codec = CodecXOR },
		"geometry":                func(sb *Superblock) { sb.Geometry.K = 1 },
		"journal overlaps bitmap": func(sb *Superblock) { sb.JournalOffset = 32768 },
		"journal overlaps data":   func(sb *Superblock) { sb.JournalBytes = 1 << 20 },
		"journal unaligned":       func(sb *Superblock) { sb.JournalBytes = 512<<10 + 1 },
		"journal too small":       func(sb *Superblock) { sb.JournalBytes = 4096 },
		"journal in version 1":    func(sb *Superblock) { sb.Version = VersionNoJournal },
		"version 5":               func(sb *Superblock) { sb.Version = VersionFixedParity + 1 },
		"version 4, rotating":     func(sb *Superblock) { sb.Version = VersionFixedParity },
		"fixed parity in v3":      func(sb *Superblock) { sb.Geometry.FixedParity = true },
		"owner journal in v2":     func(sb *Superblock) { sb.Version = VersionJournal; sb.Members[0].OwnerJournal = true },
		"owner journal, no area":  func(sb *Superblock) { sb.JournalOffset, sb.JournalBytes = 0, 0; sb.Members[0].OwnerJournal = true },
		// Areas that fit the offsets but would make assembly allocate
		// them whole: a 4 GiB bitmap, a 1 TiB journal.
		"huge bitmap": func(sb *Superblock) {
			sb.BitmapBytes = 1<<32 - SectorAlign
			sb.JournalOffset, sb.JournalBytes = 0, 0
			sb.DataOffset = sb.BitmapOffset + int64(sb.BitmapBytes)
		},
		"huge journal": func(sb *Superblock) { sb.JournalBytes = 1 << 40; sb.DataOffset = sb.JournalOffset + sb.JournalBytes },
	} {
		sb := sample()
		mut(sb)
		if _, err := sb.Marshal(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Marshal = %v", name, err)
		}
	}
}

type fakeDisk []byte

func (d fakeDisk) ReadAt(p []byte, off int64) (int, error) { return copy(p, d[off:]), nil }

func TestReadCopiesTornWrite(t *testing.T) {
	old := sample()
	newer := sample()
	newer.Events++
	bo, _ := old.Marshal()
	bn, _ := newer.Marshal()
	disk := make(fakeDisk, MetaEnd)
	copy(disk[CopyAOffset:], bn)
	copy(disk[CopyBOffset:], bo)
	sb, err := ReadCopies(disk)
	if err != nil || sb.Events != newer.Events {
		t.Fatalf("ReadCopies = %v, %v", sb, err)
	}
	// Torn copy A: B (older) still assembles.
	for i := CopyAOffset + 2000; i < CopyAOffset+CopySize; i++ {
		disk[i] = 0
	}
	sb, err = ReadCopies(disk)
	if err != nil || sb.Events != old.Events {
		t.Fatalf("ReadCopies after torn A = %v, %v", sb, err)
	}
	clear(disk)
	if _, err := ReadCopies(disk); err == nil {
		t.Fatal("blank disk read as a superblock")
	}
}

// FuzzUnmarshal: garbage never panics; whatever decodes re-encodes to the
// same value (netlink's round-trip invariant) and identical bytes twice.
func FuzzUnmarshal(f *testing.F) {
	b, _ := sample().Marshal()
	f.Add(b)
	f.Add(b[:300])
	f.Add([]byte(Magic))
	// Every fail reason, and a version 1 copy written before reasons were
	// recorded (byte 50 of the entry zero).
	for _, r := range []FailReason{FailUnrecorded, FailIO, FailMissing, FailUnreachable, FailMax + 1} {
		sb := sample()
		sb.Members[4].Failure = r
		b, err := sb.Marshal()
		if r > FailMax {
			b, _ = sample().Marshal()
			b[headerSize+4*entrySize+50] = byte(r)
			sealCRC(b)
		} else if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	v1 := sample()
	v1.Version, v1.JournalOffset, v1.JournalBytes = VersionNoJournal, 0, 0
	v1.Members[4].Failure = FailUnrecorded
	b1, _ := v1.Marshal()
	f.Add(b1)
	v4 := sample()
	v4.Version, v4.Geometry.FixedParity = VersionFixedParity, true
	b4, _ := v4.Marshal()
	f.Add(b4)
	// Owner-journal flags (version 3) on an active, a rebuilding (with
	// resync) and a failed member, and a version 2 copy.
	v3 := sample()
	v3.Members[0].OwnerJournal, v3.Members[3].OwnerJournal, v3.Members[4].OwnerJournal = true, true, true
	b3, _ := v3.Marshal()
	f.Add(b3)
	v2 := sample()
	v2.Version = VersionJournal
	b2, _ := v2.Marshal()
	f.Add(b2)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) >= CopySize && len(data) > 300 {
			// Keep the fuzzer's mutations from being killed by the CRC
			// every time: re-seal half of the inputs.
			if data[len(data)-1]&1 == 1 {
				d := bytes.Clone(data[:CopySize])
				copy(d, Magic)
				sealCRC(d)
				data = d
			}
		}
		sb, err := Unmarshal(data)
		if (sb == nil) == (err == nil) {
			t.Fatalf("sb %v and err %v disagree", sb, err)
		}
		if err != nil {
			return
		}
		for i, m := range sb.Members {
			if m.Failure > FailMax || m.Failure != FailUnrecorded && m.Role != RoleFailed {
				t.Fatalf("member %d: %s member with fail reason %d decoded", i, m.Role, m.Failure)
			}
		}
		enc, err := sb.Marshal()
		if err != nil {
			t.Fatalf("decoded superblock does not re-encode: %v", err)
		}
		sb2, err := Unmarshal(enc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sb, sb2) {
			t.Fatalf("round trip changed value")
		}
		enc2, _ := sb2.Marshal()
		if !bytes.Equal(enc, enc2) {
			t.Fatal("marshal not deterministic")
		}
	})
}

// A new owner's copy (higher epoch, fewer events) beats the old owner's
// copy with more events: the epoch orders first, in ReadCopies as in
// assembly.
func TestReadCopiesNewOwnerEpochWins(t *testing.T) {
	newOwner := sample()
	newOwner.Epoch, newOwner.Events = 4, 101
	oldOwner := sample()
	oldOwner.Epoch, oldOwner.Events = 3, 102
	bn, _ := newOwner.Marshal()
	bo, _ := oldOwner.Marshal()
	for _, order := range [][2][]byte{{bn, bo}, {bo, bn}} {
		disk := make(fakeDisk, MetaEnd)
		copy(disk[CopyAOffset:], order[0])
		copy(disk[CopyBOffset:], order[1])
		sb, err := ReadCopies(disk)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Epoch != 4 || sb.Events != 101 {
			t.Fatalf("ReadCopies chose epoch %d events %d, want the new owner's epoch 4 events 101", sb.Epoch, sb.Events)
		}
	}
	if !Newer(newOwner, oldOwner) || Newer(oldOwner, newOwner) || Newer(newOwner, newOwner) {
		t.Fatal("Newer does not order epoch first")
	}
}

// The fail reason lives in byte 50 of a member table entry, reserved and
// zero in copies written before reasons were recorded: those still decode
// (reason unrecorded), in both format versions. Unknown reasons and a
// reason on a member that is not failed are rejected.
func TestFailReason(t *testing.T) {
	for _, ver := range []uint32{Version, VersionNoJournal} {
		sb := sample()
		if ver == VersionNoJournal {
			sb.Version, sb.JournalOffset, sb.JournalBytes = ver, 0, 0
		}
		b, err := sb.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		e := b[headerSize+4*entrySize:]
		if FailReason(e[50]) != FailAdmin {
			t.Fatalf("version %d: fail reason byte %d, want %d", ver, e[50], FailAdmin)
		}
		e[50] = 0 // as an older build wrote it
		sealCRC(b)
		got, err := Unmarshal(b)
		if err != nil || got.Members[4].Role != RoleFailed || got.Members[4].Failure != FailUnrecorded {
			t.Fatalf("version %d copy without a reason: %+v, %v", ver, got, err)
		}
		e[50] = byte(FailUnreachable)
		sealCRC(b)
		if got, err := Unmarshal(b); err != nil || got.Members[4].Failure != FailUnreachable || !got.Members[4].Failure.Returns() {
			t.Fatalf("version %d copy with reason unreachable: %+v, %v", ver, got, err)
		}
		e[50] = byte(FailMax + 1)
		sealCRC(b)
		if _, err := Unmarshal(b); err == nil || !strings.Contains(err.Error(), "fail reason") {
			t.Fatalf("version %d: unknown reason accepted: %v", ver, err)
		}
	}
	sb := sample()
	sb.Members[0].Failure = FailIO // member 0 is active
	if _, err := sb.Marshal(); err == nil || !strings.Contains(err.Error(), "fail reason io-error on active member") {
		t.Fatalf("reason on an active member: %v", err)
	}
}
