// Package owner is lease-backed ownership of volumes in etcd: which node
// runs a volume's engine, its owner epoch (the fencing token), and the
// owner's self-fence deadline.
//
// # Ownership and epoch
//
// A volume is owned through one key, keys.Owner(volume UUID), attached to
// the owner's lease (a Session). Acquire creates it in a transaction that
// succeeds only while no key exists, so there is at most one owner; the
// key's create revision is the volume's epoch. Revisions only grow, so
// every takeover has a larger epoch than any before it. The epoch goes into
// the superblocks (engine.Options.Epoch at assembly, Volume.Thaw): members
// refuse an assembly with an older epoch, and an older owner's engine stops
// at its next metadata write when it finds a newer one. When the owner's
// lease expires at the server, etcd deletes the key, and another node may
// Acquire.
//
// A lease is not mutual exclusion by itself (etcd's own documentation):
// the old owner may still run after the server expired its lease. Two
// things stop it: the storage fence at the drive exporters (package
// exporter), and this package's self-fence.
//
// # Self-fence deadline
//
// The owner renews its lease itself, one keepalive every TTL/3, and
// remembers when the last keepalive that was answered was *sent*. The
// server renewed the lease after it received that keepalive, so the lease
// cannot expire at the server before sent + TTL. A new etcd leader only
// extends leases (by the election timeout, and without etcd's LeaseCheckpoint
// it resets the remaining TTL to the full TTL), and a leader answers a
// keepalive only after confirming its leadership (etcd's ensureLeadership
// in LeaseRenew), so the server's expiry is never earlier than that. The
// owner must have stopped acknowledging writes by then; it self-fences at
//
//	deadline = sent + TTL - margin
//	margin   = TTL/100 (clock rate skew: the etcd leader's clock may run
//	           up to 1% fast against ours while it times the lease)
//	         + StopBudget (time from the deadline until the engines are
//	           frozen: timer and scheduling delay on a loaded host)
//
// With the defaults (TTL 6 s, keepalive every 2 s, StopBudget 900 ms): margin
// 960 ms, deadline = sent + 5.04 s. An owner whose keepalives are
// answered renews every 2 s and never gets near it; an owner that is cut
// off self-fences 5.04 s after the last answered keepalive was sent (about
// 3.0 to 5.0 s after it was cut off), while the lease lives at least until
// sent + 6 s at the server and another node's Acquire succeeds only after
// etcd has deleted the key. The granted TTL (the server raises a TTL below
// its minimum, 1.5 x the election timeout) is what the deadline uses.
//
// A self-fence is final for the Session: later answers do not lift it. The
// owner's engines stay frozen until it holds a new epoch (a new Session,
// Acquire after the old key is gone, Volume.Thaw with the new epoch).
//
// # What is not here
//
// Choosing the new owner, the storage fence acknowledgements ("fenced for
// epoch E"), assembly on the new owner and the daemon loop that runs all of
// it are not in this package (docs/cluster.md, "Failover").
package owner
