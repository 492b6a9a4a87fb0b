// Package productbench is the product benchmark of `make vmbench`: in one
// 6.12 guest it runs fio against the raw disks, Linux md RAID-6 and a
// fabraid 4+2 volume created through fabraidd on the same disks (through
// /dev/ublkbN and through the NVMe/TCP multipath head), healthy, with one
// member failed, and the rebuild of a replaced member against md's
// recovery while a 4 KiB random-read job runs for its first seconds (that
// job's p99 against the same job without a rebuild), on virtio disks and
// on null_blk. Method and results:
// docs/performance.md ("Product benchmark").
package productbench
