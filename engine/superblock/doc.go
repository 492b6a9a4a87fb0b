// Package superblock encodes and decodes the fabraid member superblock: the
// fixed little-endian metadata record every member carries twice, so that a
// torn write of one copy never loses the volume.
//
// The byte layout is documented in docs/on-disk-format.md and mirrored by
// the offsets in this package; Unmarshal validates everything it returns
// (magic, version, CRC32C, geometry, member table, offsets), so callers can
// trust any *Superblock it hands out to be internally consistent. Whether a
// set of superblocks forms a volume is decided by the engine's assembly.
//
// The package does no I/O beyond the io.ReaderAt helper ReadCopies.
package superblock
