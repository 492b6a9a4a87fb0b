package superblock

import (
	"encoding/binary"
	"hash/crc32"
)

func sealCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[crcOffset:], crc32.Checksum(b[:crcOffset], castagnoli))
}
