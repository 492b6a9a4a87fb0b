// Package nvmetls prepares the pre-shared keys of NVMe/TCP TLS (NVMe
// TP 8011: TLS 1.3 with a PSK) for the Linux kernel: it reads and writes
// configured PSKs in the interchange format ("NVMeTLSkey-1:hh:<base64>:",
// what nvme-cli's gen-tls-key prints), derives the TLS PSK and the PSK
// identity the kernel looks up for a host/subsystem pair, and places it
// in the kernel's .nvme keyring (key type "psk") with add_key(2), where
// both the host's nvme-tcp and nvmet's tcp ports find it and hand it to
// tlshd (ktls-utils), which runs the handshake.
//
// # Identities and derivation
//
// Linux 6.12 looks up version 0 identities of retained PSKs first:
// "NVMe0R<hh> <hostnqn> <subnqn>", hh = 02 (SHA-384, TLS_AES_256_GCM_SHA384)
// before 01 (SHA-256, TLS_AES_128_GCM_SHA256), then generated ("G")
// ones (drivers/nvme/common/keyring.c). The key stored under the identity
// is the TLS PSK derived as libnvme derives it for version 0:
//
//	retained = configured                                 (hash field 00)
//	retained = HKDF-Expand(HKDF-Extract(0, configured),
//	             len16 || "tls13 " || "HostNQN" || hostnqn, len)  (01, 02)
//	tls psk  = HKDF-Expand(HKDF-Extract(0, retained),
//	             len16 || "tls13 " || "nvme-tls-psk" || identity, len)
//
// with SHA-256 or SHA-384 as the identity's hash, len the configured
// key's length and len16 that length as two little-endian bytes (libnvme
// passes the host-order uint16 on x86). Both ends of a fabraid connection
// use this package, so they agree; agreement with keys nvme-cli derived
// is not tested here.
//
// Keys are secrets: PSK's String, GoString and LogValue redact them.
//
// What this package does not do: start tlshd, configure nvmet ports or
// connect controllers; see kernel/nvmet and kernel/nvmf.
package nvmetls
