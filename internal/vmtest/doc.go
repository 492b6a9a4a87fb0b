// Package vmtest boots real Linux kernels in qemu guests and runs Go test
// functions inside them, so kernel-facing code (nvmet, nvme-tcp, ublk,
// configfs) is tested against the real thing on a host whose own kernel
// lacks it.
//
// # Writing a VM test
//
// A VM test is an ordinary Go test. The same test binary runs twice: on the
// host, Run builds an initramfs holding the binary itself, boots one qemu
// guest per GuestConfig and waits for their verdicts; inside each guest, the
// binary is started with -test.run selecting exactly this test, Run sees that
// it is inside a guest and calls fn there, with a real *testing.T.
//
//	func TestIntegrationExport(t *testing.T) {
//		vmtest.Run(t, vmtest.Options{
//			Guests: []vmtest.GuestConfig{
//				{Name: "a", Kernel: vmtest.Kernel612, Modules: []string{"nvmet_tcp"}, Disks: []vmtest.Disk{{Size: 64 << 20}}},
//				{Name: "b", Kernel: vmtest.Kernel612, Modules: []string{"nvme_tcp"}},
//			},
//		}, func(t *testing.T, g *vmtest.Env) {
//			switch g.Name {
//			case "a":
//				// export g.Disks[0] on g.Addr("a") ...
//				g.Signal(t, "exported")
//			case "b":
//				g.Wait(t, "a", "exported")
//				// connect to g.Addr("a") ...
//			}
//		})
//	}
//
// Everything in fn runs in the guest: it may use t.Fatal, t.Skip, t.Log as
// usual. A guest test passes when every guest passes; a skip in any guest is
// reported as a skip on the host with the guest's reason. Code outside fn runs
// on the host (and, harmlessly, again in the guest before Run returns).
//
// VM tests run only when FABRAID_VMTEST=1 (make test and make vmtest set
// it); otherwise Run skips, saying so, so plain `go test ./...` needs no root,
// qemu or guest kernel. With FABRAID_VMTEST=1 a missing qemu or kernel is a
// failure, never a skip. The test binary must be static (CGO_ENABLED=0).
//
// # Kernels and capabilities
//
// Kernel612 and Kernel61 name Debian's kernel series; the newest package of
// each is fetched once with apt-get download into the cache directory
// (FABRAID_VMTEST_CACHE, default <repo>/.cache/vmtest) and reused. Caps
// reports what a kernel offers (ublk, nvmet auth, TLS, loop, ...) from its
// config and module tree, so a test that cannot run on a kernel skips with a
// stated reason: RequireCaps does that.
//
// # Guests
//
// Each guest gets its disks as /dev/vda, /dev/vdb, ... (sparse raw files,
// serial numbers set), a host directory shared over 9p at /mnt/host (also
// used for Signal/Wait), the requested modules loaded with their
// dependencies (configfs mounted at /sys/kernel/config when loaded), and,
// when there are two or more guests, one virtio NIC (eth0) on a private
// network that the host process relays over loopback UDP; addresses are
// static link-local (Env.Addr). Guests have busybox at /bin.
//
// # Faults
//
// A guest-side test can ask the host (through files in the share) for
// faults only the host can make:
//
//   - Env.RemoveDisk(t, i) hot-unplugs disk i (qemu device_del), and
//     Env.AddDisk(t, i) plugs it back (device_add with the same image, id
//     and serial), returning its new /dev path once the guest has it.
//   - Env.Kill(t, "b") cuts guest b's power (SIGKILL of its qemu, no clean
//     shutdown) and Env.Boot(t, "b") boots it again with the same disk
//     images, MAC, address and hub port. The rebooted guest runs the test
//     function again from the start with Env.BootNum 2 (3, ...): set up on
//     boot 1, check on boot 2. A killed boot is not a failure: a guest's
//     outcome is its last boot's, and one that stays off passes. A guest's
//     events (Signal) are per boot: Kill and Boot remove those of the
//     killed boot, so after Boot, Wait(t, "b", "up") waits for the new
//     boot's "up". A guest that waits for an event of a guest that is off
//     waits until it is booted again (or the run's Timeout, which covers
//     every boot). Rebooted guests keep their CPU slots.
//   - Env.Partition(t, "a", "b") makes the hub drop every frame between a
//     and b (both ways, broadcast and ARP included), Env.Isolate(t, "a")
//     between a and everyone, Env.Heal(t) (or Heal(t, a) or Heal(t, a, b))
//     removes partitions. Other pairs are unaffected; partitions outlast
//     reboots. Env.PartitionPorts(t, "a", "b", 2379, 2380) cuts only the
//     TCP and UDP traffic from or to those ports between a and b (etcd
//     cut, NVMe/TCP still flowing).
//
// Requests are carried out one at a time, in the order the host sees them.
//
// # Systemd guests
//
// GuestConfig.Systemd boots the guest with Debian 12's systemd as PID 1 and
// dbus-daemon on the system bus, for tests of units, D-Bus and the journal.
// The Depends/Pre-Depends closure of the systemd and dbus packages (minus
// install-time packages such as perl, debconf and dpkg) is fetched once with
// apt-get download, unpacked with dpkg-deb into a usr-merged tree under the
// cache (keyed by the package versions), pruned of documentation and
// checked with debug/elf: every interpreter and DT_NEEDED library must be
// in the tree. /init prepares the guest as usual and execs systemd, whose
// default target (vmtest.target) is basic.target plus dbus.service and
// vmtest-payload.service; that service runs the payload with the same
// environment and verdict logic as plain guests, its output on the
// console. Units a test brings go into Files under /usr/lib/systemd/system/
// or /etc/systemd/system/ (written 0644); start them with systemctl or over
// D-Bus. journald forwards warnings and worse to the console. See
// docs/testing.md for what is masked and the boot times.
//
// Guests run under qemu TCG (KVM only where it really works); the serial
// console streams into the test log prefixed with the guest name. A guest
// passes only when qemu exits through isa-debug-exit with the pass code AND
// the console printed the pass marker. On timeout or cancel qemu is killed;
// temporary files are removed (kept when FABRAID_VMTEST_KEEP=1).
//
// Concurrency: a host-wide slot lock (one slot per CPU) bounds the number
// of guests running at once across all test processes.
package vmtest
