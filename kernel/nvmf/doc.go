// Package nvmf is the NVMe over Fabrics initiator (host) side: it builds and
// validates connect option strings, creates controllers through
// /dev/nvme-fabrics, deletes them, lists controllers, namespaces, paths and
// subsystems from sysfs, reads discovery log pages, keeps the host identity
// consistent with nvme-cli, and generates DH-HMAC-CHAP secrets.
//
// # Connecting
//
//	id, _ := nvmf.LoadHostIdentity(nvmf.DefaultHostDir)
//	t, _ := nvmf.Profile(nvmf.ProfileMember)
//	c, err := nvmf.NewHost().Connect(nvmf.Options{
//		Transport: nvmf.TCP, Address: "10.0.0.2", ServiceID: "4420",
//		NQN: "nqn.2026-11.io.fabraid:drive:S4EW...", HostNQN: id.NQN, HostID: id.ID,
//		Timeouts: &t,
//	})
//
// Options.Validate rejects unknown transports, malformed NQNs, addresses and
// secrets, out-of-range queue sizes and timeouts, and any value that could
// smuggle another option into the comma-separated string; the kernel never
// sees a malformed request. Errors wrap ErrInvalidOptions.
//
// # Timeout profiles
//
// The kernel defaults (keep-alive 5 s, reconnect every 10 s, give up after
// 600 s, never fail I/O early) hide a dead RAID member for ten minutes.
// ProfileMember surfaces a dead member as I/O errors within seconds
// (measured in TestIntegrationMemberLoss); ProfileVolumePath queues I/O
// through an owner failover instead of failing it.
//
// # Multipath
//
// With native NVMe multipath (CONFIG_NVME_MULTIPATH, Debian default) every
// controller of a subsystem contributes a hidden path device nvme<S>c<C>n<N>
// to one head nvme<S>n<N>; I/O goes to the head and the ANA state of each
// path picks where. Controller.Paths reports both names.
//
// # Feature detection
//
// Reading /dev/nvme-fabrics with no controller prints the options this
// kernel accepts; Host.SupportedOptions uses it to tell whether
// dhchap_secret and tls exist, and Connect fails early with ErrNotSupported
// instead of the kernel's bare EINVAL.
//
// This package does not load modules and does not reconcile: the daemon's
// importer lists controllers (Sysfs.Controllers), compares them to the
// desired connections and calls Connect/Disconnect.
package nvmf
