package nvmesys

// PassthruCmd mirrors struct nvme_passthru_cmd (alias nvme_admin_cmd) from
// include/uapi/linux/nvme_ioctl.h: 72 bytes.
type PassthruCmd struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	Cdw2        uint32
	Cdw3        uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	Cdw10       uint32
	Cdw11       uint32
	Cdw12       uint32
	Cdw13       uint32
	Cdw14       uint32
	Cdw15       uint32
	TimeoutMS   uint32
	Result      uint32
}

// IoctlAdminCmd is NVME_IOCTL_ADMIN_CMD = _IOWR('N', 0x41, struct nvme_admin_cmd).
const IoctlAdminCmd = 0xC0484E41

// Admin opcodes and log identifiers (NVMe base spec 5.16).
const (
	AdminGetLogPage = 0x02
	LogDiscovery    = 0x70
)
