// Package smoke holds the foundation's end-to-end smoke tests: real kernels
// in qemu guests exporting a disk through nvmet configfs and reading it back
// through the nvme-tcp initiator, on one guest, between two guests, and on
// the 6.1 compatibility kernel. They use raw configfs and /dev/nvme-fabrics
// on purpose, independent of kernel/nvmet and kernel/nvmf, so they check
// the kernels and the harness, not our own packages.
package smoke
