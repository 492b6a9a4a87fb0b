package nvmesys

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// ErrKeyCRC is returned by DecodeKeyText for a key whose CRC does not
// match.
var ErrKeyCRC = errors.New("CRC mismatch")

// EncodeKeyText is the base64 part of the NVMe key text forms
// (DH-HMAC-CHAP "DHHC-1:hh:...:" and TLS "NVMeTLSkey-1:hh:...:"):
// base64(key || CRC-32 of key, little-endian). The kernel computes
// ~crc32_le(~0, key), the IEEE CRC-32 (drivers/nvme/common/auth.c).
func EncodeKeyText(key []byte) string {
	buf := make([]byte, len(key)+4)
	copy(buf, key)
	binary.LittleEndian.PutUint32(buf[len(key):], crc32.ChecksumIEEE(key))
	return base64.StdEncoding.EncodeToString(buf)
}

// DecodeKeyText reverses EncodeKeyText: the key without its CRC, which
// must match (ErrKeyCRC). Lengths are the caller's to check.
func DecodeKeyText(b64 string) ([]byte, error) {
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		return nil, err
	}
	if len(raw) < 4 {
		return nil, errors.New("shorter than its CRC")
	}
	key := raw[:len(raw)-4]
	if binary.LittleEndian.Uint32(raw[len(key):]) != crc32.ChecksumIEEE(key) {
		return nil, ErrKeyCRC
	}
	return key, nil
}
