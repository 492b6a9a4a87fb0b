//go:build linux

package memberio

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"

	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Reachability: the engine asks a member whose I/O failed whether the
// device is gone rather than bad (engine.FailureClassifier). A gone device
// (a remote drive whose node powered off or whose network was cut, a
// drive pulled) still holds the data it had; it is recorded as
// unreachable and returns with a resync of the write-intent bitmap's
// regions. A device that answers with an error is not trusted again
// without a full rebuild.

// unreachableErrnos are the errors the block layer returns for a device or
// path that is gone: ENOLINK (BLK_STS_TRANSPORT, an NVMe host path error),
// ENODEV (BLK_STS_OFFLINE, or a queue that is dying), ENXIO (a device that
// was removed), ESHUTDOWN.
var unreachableErrnos = []unix.Errno{unix.ENOLINK, unix.ENODEV, unix.ENXIO, unix.ESHUTDOWN}

var nvmeNamespaceRe = regexp.MustCompile(`^nvme\d+n\d+$`)

// sysBlock identifies the block device behind a member: the sysfs link
// /sys/dev/block/MAJ:MIN and the device directory it resolved to at Open.
type sysBlock struct {
	link, dir string
}

// lookupSysBlock resolves the sysfs directory of the block device f is
// open on (zero for a regular file).
func lookupSysBlock(sysfs string, fd int) sysBlock {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return sysBlock{}
	}
	link := filepath.Join(sysfs, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return sysBlock{}
	}
	return sysBlock{link: link, dir: dir}
}

// Unreachable implements engine.FailureClassifier: err, from an I/O on m,
// means the device cannot be reached when err carries one of
// unreachableErrnos, when m's block device has vanished (its sysfs device
// is gone or its number belongs to another device now), or when it is an
// NVMe namespace none of whose controllers is live (native multipath: any
// path's controller; a namespace with no controller left counts as
// unreachable). An error on a device that is still there with a live
// controller (EIO from the media, a null_blk bad block) is not.
func (m *Member) Unreachable(err error) bool {
	for _, e := range unreachableErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	if m.sys.link == "" {
		return false
	}
	if dir, err := filepath.EvalSymlinks(m.sys.link); err != nil || dir != m.sys.dir {
		return true
	}
	name := filepath.Base(m.sys.dir)
	if !nvmeNamespaceRe.MatchString(name) {
		return false
	}
	return !nvmeLive(nvmf.Sysfs{Root: m.sysfs}, name)
}

// nvmeLive reports whether some controller carrying I/O for the namespace
// block device name ("nvme2n1": a multipath head or a namespace without
// multipath) is live.
func nvmeLive(s nvmf.Sysfs, name string) bool {
	cs, err := s.Controllers()
	if err != nil {
		return true // cannot tell: not evidence of a lost path
	}
	for _, c := range cs {
		for _, p := range c.Paths {
			if p.Head == name && c.State == "live" {
				return true
			}
		}
	}
	return false
}
