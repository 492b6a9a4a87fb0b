package vmtest

import (
	"fmt"
	"strings"
	"testing"
)

// Caps is what a guest kernel offers, read from its config and module tree
// on the host before any boot. Runtime detail (ublk feature bits) is probed
// inside the guest by the packages that need it.
type Caps struct {
	Series  string
	Release string
	Package string

	Configfs      bool // configfs (module or built in)
	Nvmet         bool // nvmet target
	NvmetTCP      bool // nvmet-tcp transport
	NvmetLoop     bool // nvme-loop transport (NVME_TARGET_LOOP)
	NvmetAuth     bool // DH-HMAC-CHAP in the target (NVME_TARGET_AUTH)
	NvmetTCPTLS   bool // TLS in the nvmet-tcp target (NVME_TARGET_TCP_TLS)
	NvmetPassthru bool // NVME_TARGET_PASSTHRU
	NvmeTCP       bool // nvme-tcp initiator
	NvmeTCPTLS    bool // TLS in the initiator (NVME_TCP_TLS)
	NvmeAuth      bool // DH-HMAC-CHAP in the host (NVME_HOST_AUTH)
	Multipath     bool // native NVMe multipath (NVME_MULTIPATH)
	Ublk          bool // ublk_drv (BLK_DEV_UBLK)
	NullBlk       bool // null_blk
	IOUring       bool // IO_URING
}

// CapsOf computes the capabilities of a fetched kernel.
func CapsOf(k *Kernel) Caps {
	on := func(opt string) bool { v := k.Config(opt); return v == "y" || v == "m" }
	return Caps{
		Series: k.Series, Release: k.Release, Package: k.Package,
		Configfs:      on("CONFIG_CONFIGFS_FS"),
		Nvmet:         on("CONFIG_NVME_TARGET") && k.HasModule("nvmet"),
		NvmetTCP:      on("CONFIG_NVME_TARGET_TCP") && k.HasModule("nvmet_tcp"),
		NvmetLoop:     on("CONFIG_NVME_TARGET_LOOP") && k.HasModule("nvme_loop"),
		NvmetAuth:     on("CONFIG_NVME_TARGET_AUTH"),
		NvmetTCPTLS:   on("CONFIG_NVME_TARGET_TCP_TLS"),
		NvmetPassthru: on("CONFIG_NVME_TARGET_PASSTHRU"),
		NvmeTCP:       on("CONFIG_NVME_TCP") && k.HasModule("nvme_tcp"),
		NvmeTCPTLS:    on("CONFIG_NVME_TCP_TLS"),
		NvmeAuth:      on("CONFIG_NVME_HOST_AUTH"),
		Multipath:     on("CONFIG_NVME_MULTIPATH"),
		Ublk:          on("CONFIG_BLK_DEV_UBLK") && k.HasModule("ublk_drv"),
		NullBlk:       on("CONFIG_BLK_DEV_NULL_BLK") && k.HasModule("null_blk"),
		IOUring:       on("CONFIG_IO_URING"),
	}
}

// GetCaps fetches the kernel of a series (cached) and returns its
// capabilities. In a guest it returns the capabilities recorded for the
// guest's kernel by the host: only Series is set there, so decide on
// capabilities on the host side of a test, before Run.
func GetCaps(t testing.TB, series string) Caps {
	t.Helper()
	if InGuest() || !Enabled() {
		return Caps{Series: series}
	}
	k, err := GetKernel(series)
	if err != nil {
		t.Fatal(err)
	}
	return CapsOf(k)
}

// Missing returns the names of the wanted capabilities the kernel lacks;
// names are the Caps field names ("Ublk", "NvmetAuth", ...).
func (c Caps) Missing(want ...string) []string {
	have := map[string]bool{
		"Configfs": c.Configfs, "Nvmet": c.Nvmet, "NvmetTCP": c.NvmetTCP, "NvmetLoop": c.NvmetLoop,
		"NvmetAuth": c.NvmetAuth, "NvmetTCPTLS": c.NvmetTCPTLS, "NvmetPassthru": c.NvmetPassthru,
		"NvmeTCP": c.NvmeTCP, "NvmeTCPTLS": c.NvmeTCPTLS, "NvmeAuth": c.NvmeAuth,
		"Multipath": c.Multipath, "Ublk": c.Ublk, "NullBlk": c.NullBlk, "IOUring": c.IOUring,
	}
	var missing []string
	for _, w := range want {
		v, ok := have[w]
		if !ok {
			missing = append(missing, w+"(unknown capability)")
		} else if !v {
			missing = append(missing, w)
		}
	}
	return missing
}

// RequireCaps skips the test, with the reason, unless the kernel of series
// has every wanted capability. Call it on the host side, before Run (in the
// guest it does nothing: the host already decided).
func RequireCaps(t testing.TB, series string, want ...string) {
	t.Helper()
	if InGuest() || !Enabled() {
		return
	}
	c := GetCaps(t, series)
	if m := c.Missing(want...); len(m) > 0 {
		t.Skip(fmt.Sprintf("kernel %s (%s) lacks %s", c.Release, c.Package, strings.Join(m, ", ")))
	}
}
