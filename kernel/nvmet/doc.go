// Package nvmet configures the Linux NVMe-oF target (nvmet) through
// configfs, declaratively: the caller states the whole desired
// configuration as a Spec (subsystems with namespaces and allowed hosts,
// ports with their linked subsystems and ANA group states, hosts with
// DH-HMAC-CHAP keys) and Target.Apply converges /sys/kernel/config/nvmet to
// it.
//
// # Reconcile
//
// Apply reads the actual state every time (Read), computes
// plan := Diff(desired, actual) and executes the plan. Diff is pure and
// table-tested without a kernel; the plan is ordered the way the kernel
// needs (unlink before rmdir, disable a namespace before changing its
// device, change port addresses only while nothing is linked, link
// subsystems to ports last). Apply is idempotent: a converged system gives
// an empty plan. It is safe to re-run after a crash half-way, because the
// plan is derived from what configfs holds, not from what a previous run
// did.
//
// # Ownership
//
// Only objects fabraid owns are changed or removed (Ownership: an NQN
// prefix for subsystems, a port id range; hosts no foreign subsystem
// uses). Other tools' objects are left alone. Name kernel objects after
// desired state (the volume's NQN, a port id derived from the address) so
// a restarted daemon finds its own objects again.
//
// # Security defaults
//
// attr_allow_any_host is always 0: every subsystem lists its hosts. A Host
// may carry DH-HMAC-CHAP keys (kernel/nvmf generates them); Read returns
// them, so treat a State as secret. Plans print keys as <secret>.
//
// # Kernel features
//
// Optional attributes are detected by their presence (Probe, and Read
// notes what existing objects show), never from the kernel version:
// distribution kernels backport. attr_firmware is cosmetic and dropped
// silently where missing; DH-HMAC-CHAP or TLS on a kernel without them fail
// with an error wrapping ErrNotSupported.
//
// What this package does not do: load modules, mount configfs, start tlshd,
// or touch the host (initiator) side; see kernel/nvmf.
package nvmet
