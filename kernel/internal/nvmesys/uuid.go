package nvmesys

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidUUID is returned (wrapped) by ParseUUID.
var ErrInvalidUUID = errors.New("invalid UUID")

// UUID is a 16-byte identifier (namespace UUID, NGUID, host id).
type UUID [16]byte

// ParseUUID accepts the 36-character dashed form and, for NGUIDs, the
// 32-hex-digit form; case is ignored.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	h := s
	if len(s) == 36 {
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return u, fmt.Errorf("%w: %q", ErrInvalidUUID, s)
		}
		h = strings.ReplaceAll(s, "-", "")
	}
	if len(h) != 32 {
		return u, fmt.Errorf("%w: %q", ErrInvalidUUID, s)
	}
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("%w: %q", ErrInvalidUUID, s)
	}
	return u, nil
}

// NewRandomUUID returns a version 4 UUID.
func NewRandomUUID() (UUID, error) {
	var u UUID
	if _, err := rand.Read(u[:]); err != nil {
		return u, fmt.Errorf("random uuid: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u, nil
}

// String formats u as the kernel's %pUb does: lowercase, dashed.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// IsZero reports whether u is all zeroes.
func (u UUID) IsZero() bool { return u == UUID{} }
