// Package productbench is the product benchmark of `make vmbench`: in one
// 6.12 guest it runs fio against the raw disks, Linux md RAID-6 and a
// fabraid 4+2 volume created through fabraidd on the same disks (through
// /dev/ublkbN and through the NVMe/TCP multipath head), healthy, with one
// member failed, and the rebuild of a replaced member against md's
// recovery, on virtio disks and on null_blk. Method and results:
// docs/performance.md ("Product benchmark").
package productbench
