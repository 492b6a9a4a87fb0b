// Package drive finds the node's local drives, tells whether a drive may be
// given to fabraid, and records claims.
//
// # Inventory
//
// Inventory reads /sys/block: model, serial, size, partitions, holders, and
// skips devices that are not drives (loop, ram, zram, dm, md, ublk, hidden
// multipath paths, and fabraid's own exported volumes).
//
// # Signatures
//
// Detect is a pure function over a device's bytes (an io.ReaderAt and the
// size): it reports ext2/3/4, xfs, btrfs, swap, LUKS, LVM2, md RAID (0.90,
// 1.0, 1.1, 1.2), GPT, MBR and fabraid member superblocks. It reads only the
// first and last MiB.
//
// # Claiming
//
// Check lists the reasons a drive may not be claimed: partitions, a signature,
// a holder (dm, md), a mount or swap, an exclusive opener. Claim refuses when
// there is any, unless forced; a mounted drive is refused even when forced.
// A claim wipes the first and last MiB of the drive (so no stale signature
// confuses other tools) and records the drive by its stable id in
// <state_dir>/drives/<id>.json. Nothing else is remembered: the claim files
// are the state.
package drive
