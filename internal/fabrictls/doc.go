// Package fabrictls is the NVMe/TCP TLS policy of a fabraid cluster node
// (the nvme_tls setting, docs/nvmeof.md "TLS" and docs/cluster.md
// "Security"): what its drive ports offer, whether each member connection
// uses TLS, and the PSK of each (host NQN, subsystem NQN) pair.
//
// # Modes
//
//   - Off: plain NVMe/TCP ports and connections (what a node without
//     tlshd or without NVME_TCP_TLS / NVME_TARGET_TCP_TLS can do).
//   - On: a node whose target can do TLS (Support.OK) opens its drive
//     ports with addr_tsas tls1.3 and addr_treq "not required" and says
//     so in its registry record (model.Node.NVMeTLS = PortsOptional); a
//     host connects with TLS when it can and the target offers it, else
//     without.
//   - Required: the ports require TLS (PortsRequired) and every member
//     connection uses it; a node whose target cannot do TLS exports
//     nothing (Target's error), and a host that cannot, or whose target
//     offers no TLS, connects nothing (Host's error). Both errors name
//     what is missing: NVME_TARGET_TCP_TLS, NVME_TCP_TLS, the .nvme
//     keyring (nvme_keyring) or tlshd.
//
// # PSKs per pair
//
// No PSK is stored or distributed: both ends derive the configured PSK of
// a pair from the host's DH-HMAC-CHAP host secret, which the host keeps
// in a 0600 file and the cluster already hands to the targets that export
// to it (etcd, /hostkeys/<node>), with HKDF-SHA-256 over the two NQNs
// (PairPSK), then the TLS PSK and identity the kernel looks up
// (kernel/nvmetls Derive). Each pair gets its own key; whoever can read
// the host's secret (the host, its targets, and anything that reads
// /hostkeys in etcd) can derive it, the same trust the DH-HMAC-CHAP secret
// has. Keys print redacted.
package fabrictls
