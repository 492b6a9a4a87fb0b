// Package nvmesys holds the NVMe uapi structures, ioctl numbers, wire
// constants and identifier rules shared by kernel/nvmet and kernel/nvmf.
//
// It is the only fabraid package that issues NVMe ioctls. Structures mirror
// include/uapi/linux/nvme_ioctl.h and include/linux/nvme.h of Linux 6.12;
// their sizes are checked in tests.
package nvmesys
