package vmtest

import (
	"time"
)

// Kernel series the harness knows how to fetch.
const (
	Kernel612 = "6.12" // Debian linux-image-6.12.*+deb12-amd64-unsigned: the main test kernel
	Kernel61  = "6.1"  // Debian linux-image-6.1.0-*-amd64-unsigned: compatibility (no ublk, no nvmet auth)
)

// Disk is a sparse raw file attached to a guest as a virtio-blk device.
type Disk struct {
	Size   int64  // bytes; required
	Serial string // virtio serial (/sys/block/vdX/serial); default "<guest>-disk<N>"
}

// GuestConfig describes one guest.
type GuestConfig struct {
	Name     string   // short name, [a-z0-9]; used in logs, Env.Name, Env.Addr
	Kernel   string   // Kernel612 (default) or Kernel61
	Modules  []string // modules to load at boot, dependencies resolved ("nvmet_tcp", "ublk_drv"); '-' and '_' are equivalent
	Disks    []Disk
	MemoryMB int // default 1024
	CPUs     int // default 1
	// Files are extra files for the initramfs: guest path -> host path
	// (e.g. "/usr/bin/fabraid": BuildBinary(t, ".../cmd/fabraid")).
	// Files are written 0755, except under /etc/ and the systemd library
	// directory (/usr/lib/systemd/, /lib/systemd/), where files whose host
	// copy is not executable are 0644 (unit files, configuration).
	Files map[string]string
	// Systemd boots the guest with Debian 12's systemd as PID 1 and dbus
	// (system bus), see the package documentation: the payload then runs
	// as vmtest-payload.service once journald and dbus are up. Unit files
	// go into Files under /etc/systemd/system/ or /usr/lib/systemd/system/.
	Systemd bool
	// Udev (with Systemd) adds Debian 12's udev package to the guest:
	// systemd-udevd runs and coldplugs every device at boot
	// (systemd-udev-trigger.service) with Debian's rules. Rules under test
	// go into Files under /usr/lib/udev/rules.d/ or /etc/udev/rules.d/.
	// A separate cached tree; plain systemd guests have no udev.
	Udev bool
}

// Options configures one Run.
type Options struct {
	Guests  []GuestConfig
	Timeout time.Duration // whole run, boot included; default 3 minutes
}

// Env is what a guest-side test function gets: its identity and its
// environment inside the guest.
type Env struct {
	Name   string   // this guest's name
	Index  int      // its index in Options.Guests
	Kernel string   // series it booted (Kernel612, ...)
	Disks  []string // device paths of its disks in order: /dev/vda, ... (AddDisk updates them)
	Shared string   // the host-shared directory (/mnt/host)
	// BootNum is which boot of this guest runs the test function: 1, then
	// 2 after another guest's Kill and Boot, and so on. A test that
	// survives a power cut does its setup on boot 1 and checks on boot 2.
	BootNum int
	addrs   map[string]string // guest name -> IPv4 address
	guests  []string
	serials []string // virtio serials of Disks, in order
	reqSeq  int      // last host request number of this boot
}
