package importer

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropCache drops f's clean cached pages (best effort) so that the next
// read comes from the device: a local member drive that this node
// exports has been written by the owner through nvmet, whose I/O bypasses
// this node's page cache, so pages read before (udev's probe at boot, an
// earlier look) can hold its old content.
func dropCache(f *os.File) { _ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) }
