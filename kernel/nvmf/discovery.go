package nvmf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Discovery log page layout (NVMe-oF spec 5.4, log page 0x70;
// include/linux/nvme.h struct nvmf_disc_rsp_page_hdr/_entry).
const (
	DiscoveryHeaderSize = 1024
	DiscoveryEntrySize  = 1024
	// maxDiscoveryRecords bounds what we accept from a target.
	maxDiscoveryRecords = 4096
)

// ErrTruncated is wrapped when a discovery log page is shorter than its
// header says.
var ErrTruncated = errors.New("discovery log page truncated")

// SubsystemType of a discovery log entry.
type SubsystemType uint8

const (
	SubtypeReferral         SubsystemType = 1 // another discovery controller
	SubtypeNVM              SubsystemType = 2 // an NVM subsystem
	SubtypeCurrentDiscovery SubsystemType = 3 // this discovery controller
)

func (s SubsystemType) String() string {
	switch s {
	case SubtypeReferral:
		return "referral"
	case SubtypeNVM:
		return "nvm"
	case SubtypeCurrentDiscovery:
		return "current-discovery"
	}
	return fmt.Sprintf("subtype(%d)", uint8(s))
}

// Transport type codes (TRTYPE) and address families (ADRFAM).
var (
	trtypes = map[uint8]Transport{1: RDMA, 2: FC, 3: TCP, 254: Loop}
	adrfams = map[uint8]string{0: "pci", 1: "ipv4", 2: "ipv6", 3: "ib", 4: "fc", 254: "loop"}
)

// DiscoveryEntry is one record of the discovery log.
type DiscoveryEntry struct {
	TrType    uint8 // raw TRTYPE; Transport() names it
	AdrFam    uint8 // raw ADRFAM; Family() names it
	Subtype   SubsystemType
	TReq      uint8 // transport requirements (bits 0-1 secure channel, bit 2 SQ flow control disable)
	PortID    uint16
	CntlID    uint16
	ASQSZ     uint16 // admin max SQ size
	EFlags    uint16
	TrSvcID   string
	SubNQN    string
	TrAddr    string
	TSAS      [256]byte // transport specific address subtype (tcp: byte 0 = sectype)
	TLSSecure bool      // tcp sectype TLS 1.3 (TSAS[0] == 2) — derived
}

// Transport names the entry's transport ("" if unknown).
func (e DiscoveryEntry) Transport() Transport { return trtypes[e.TrType] }

// Family names the entry's address family ("" if unknown).
func (e DiscoveryEntry) Family() string { return adrfams[e.AdrFam] }

// DiscoveryLog is a parsed discovery log page.
type DiscoveryLog struct {
	GenCtr  uint64
	RecFmt  uint16
	Entries []DiscoveryEntry
}

// NumRecords reads NUMREC from a header (at least 16 bytes).
func discoveryHeader(b []byte) (genctr, numrec uint64, recfmt uint16, err error) {
	if len(b) < DiscoveryHeaderSize {
		return 0, 0, 0, fmt.Errorf("%w: header needs %d bytes, have %d", ErrTruncated, DiscoveryHeaderSize, len(b))
	}
	return binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint16(b[16:]), nil
}

// ParseDiscoveryLog parses a discovery log page: a 1024-byte header
// (GENCTR, NUMREC, RECFMT) and NUMREC 1024-byte entries. Bytes beyond the
// last entry are ignored. Strings are NUL- or space-terminated ASCII fields.
func ParseDiscoveryLog(b []byte) (DiscoveryLog, error) {
	var l DiscoveryLog
	gen, n, recfmt, err := discoveryHeader(b)
	if err != nil {
		return l, err
	}
	if n > maxDiscoveryRecords {
		return l, fmt.Errorf("discovery log: %d records, at most %d accepted", n, maxDiscoveryRecords)
	}
	if need := DiscoveryHeaderSize + int(n)*DiscoveryEntrySize; len(b) < need {
		return l, fmt.Errorf("%w: %d records need %d bytes, have %d", ErrTruncated, n, need, len(b))
	}
	l.GenCtr, l.RecFmt = gen, recfmt
	for i := 0; i < int(n); i++ {
		e := b[DiscoveryHeaderSize+i*DiscoveryEntrySize:][:DiscoveryEntrySize]
		d := DiscoveryEntry{
			TrType:  e[0],
			AdrFam:  e[1],
			Subtype: SubsystemType(e[2]),
			TReq:    e[3],
			PortID:  binary.LittleEndian.Uint16(e[4:]),
			CntlID:  binary.LittleEndian.Uint16(e[6:]),
			ASQSZ:   binary.LittleEndian.Uint16(e[8:]),
			EFlags:  binary.LittleEndian.Uint16(e[10:]),
			TrSvcID: cstring(e[32:64]),
			SubNQN:  cstring(e[256:512]),
			TrAddr:  cstring(e[512:768]),
		}
		copy(d.TSAS[:], e[768:1024])
		d.TLSSecure = d.TrType == 3 && d.TSAS[0] == 2
		l.Entries = append(l.Entries, d)
	}
	return l, nil
}

// MarshalDiscoveryLog encodes l in the wire layout (for tests and for
// serving a log page). Strings longer than their fields are an error.
func MarshalDiscoveryLog(l DiscoveryLog) ([]byte, error) {
	b := make([]byte, DiscoveryHeaderSize+len(l.Entries)*DiscoveryEntrySize)
	binary.LittleEndian.PutUint64(b[0:], l.GenCtr)
	binary.LittleEndian.PutUint64(b[8:], uint64(len(l.Entries)))
	binary.LittleEndian.PutUint16(b[16:], l.RecFmt)
	for i, d := range l.Entries {
		e := b[DiscoveryHeaderSize+i*DiscoveryEntrySize:][:DiscoveryEntrySize]
		e[0], e[1], e[2], e[3] = d.TrType, d.AdrFam, uint8(d.Subtype), d.TReq
		binary.LittleEndian.PutUint16(e[4:], d.PortID)
		binary.LittleEndian.PutUint16(e[6:], d.CntlID)
		binary.LittleEndian.PutUint16(e[8:], d.ASQSZ)
		binary.LittleEndian.PutUint16(e[10:], d.EFlags)
		for _, f := range []struct {
			dst []byte
			s   string
			n   string
		}{{e[32:64], d.TrSvcID, "trsvcid"}, {e[256:512], d.SubNQN, "subnqn"}, {e[512:768], d.TrAddr, "traddr"}} {
			if len(f.s) > len(f.dst) || cstring([]byte(f.s)) != f.s {
				return nil, fmt.Errorf("discovery entry %d: %s %q does not fit its field", i, f.n, f.s)
			}
			copy(f.dst, f.s)
		}
		copy(e[768:1024], d.TSAS[:])
	}
	return b, nil
}

// cstring returns the ASCII string in a fixed field: up to the first NUL,
// trailing spaces removed (targets may space-pad, as Identify fields are).
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(bytes.TrimRight(b, " "))
}
