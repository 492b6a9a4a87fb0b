// Package clusterbench is the cluster benchmark of `make clusterbench`:
// three 6.12 guests (a, b, c) form a cluster, a makes a fabraid 4+2
// volume over it (two members per node, a the owner, --journal 8M: the
// stripe journal a member of 1 GiB or more gets by default, where these
// 64 MiB members would get ~1 MiB; the owner logs volume show's journal
// line and fails below 8 MiB), and c, a non-owner,
// runs fio through the volume's NVMe multipath head. The reference, in the
// same run on the same guests: on a, md RAID-6 over the same kind of
// drives (a second, identical pair of virtio disks per node; the four on
// b and c imported over nvme-tcp), exported by nvmet to c only and read
// and written by c over nvme-tcp; md has no journal and no PPL, so it
// writes no log before data and parity. The four healthy rows (1 MiB sequential
// write and read at depth 8, 4 KiB random read and write at depth 32) run
// first, then the same four with b powered off (two members of each array
// lost). Rounds alternate fabraid and md; every row is the median of the
// rounds, with the guest CPU-seconds per GiB moved of each (summed over the
// guests that are up). md has an internal write-intent bitmap (1 MiB
// chunk, fabraid's region size here; mdadm's default for arrays of 100 GiB
// and more) from its creation on (before 6 Dec 2026 only from just before b
// went down). Every idle window logs each guest's busiest commands, and the
// owner logs its engine's planned-write counters after the healthy and the
// degraded rows. Then, one
// run each: b boots again and both resync its members (md re-add through
// the bitmap, then fabraid's bitmap resync); one of b's members on each
// side is rebuilt onto b's spare drive (fabraid volume replace --wait; md
// fail, remove, add); last, c's connection with queue_size 32, 128 and
// 1024 for a sequential and a 4 KiB random read, both sides through the
// same benchmark export (md0, and the volume's ublk device). The owner
// engine's CPU profiles during one more run of each healthy job are kept.
// FABRAID_CLUSTERBENCH_KERNEL=7 boots Debian sid's 7.x kernel instead of
// 6.12, FABRAID_CLUSTERBENCH_ZEROCOPY=off sets fabraidd's ublk_zero_copy =
// off (the copy path where 7.x would read zero copy), and
// FABRAID_CLUSTERBENCH_PHASES=healthy stops after the healthy rows. The
// owner logs its engine's "serving" line (zero_copy=) and, at the end,
// the kernel's UBSAN/BUG/WARNING reports of its boot. It runs only with
// FABRAID_VMTEST=1 and FABRAID_VMBENCH=1. Method and results:
// docs/performance.md ("Cluster benchmark").
package clusterbench
