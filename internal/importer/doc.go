// Package importer is the member importer of a volume's owner node: it
// reconciles the node's NVMe/TCP connections to the drive exports of other
// nodes and tells, for every wanted member, which block device holds it
// now.
//
// # Identity
//
// Members are identified by the member UUID in their fabraid superblock
// (engine/superblock), never by /dev/nvmeXnY: a remote namespace gets a new
// name whenever its controller is recreated (a reconnect after the
// controller gave up, a node reboot, another drive connected first), and
// local names can change across boots too. Reconcile reads the superblock
// of every candidate device each time (two 8 KiB reads) and maps member
// UUID -> current device path. A member seen on two different devices is
// not mapped (a Problem): guessing could open the wrong copy.
//
// # Connections
//
// The wanted connections are Input.Remotes with the kernel/nvmf `member`
// timeout profile (a dead member fails I/O within seconds, so the engine
// goes degraded instead of hanging), this host's NQN and id, and its
// DH-HMAC-CHAP secret. nvmf.PlanConnections compares them with the
// controllers in sysfs; missing ones are connected, wrong timeouts fixed,
// and drive controllers (nqn.2026-11.io.fabraid:drive:*) nobody wants are
// deleted. One Reconcile covers every volume the node owns: a controller
// missing from Input is disconnected. A failed connect is a Problem, not
// an error: the other members still resolve, and the next Reconcile
// retries.
//
// A TLS connection's pair key (fabrictls.PairKey) goes into the keyring
// before its connect; after each Reconcile this host's pair keys of drive
// exports that neither a wanted TLS connection nor a remaining controller
// uses are revoked (the drive exporter's keys, of other hosts, are its
// own).
//
// Local members (the owner's own drives) are listed in Input.Local and
// opened directly, never through the fabric.
//
// Reconcile is level-triggered and idempotent: it reads sysfs and the
// superblocks every time and remembers nothing. Run one at a time.
package importer
