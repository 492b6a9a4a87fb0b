// Package spdk is the SPDK nvmf_tgt target backend (fabraid-plugin-spdk):
// plugins/backend's Backend over SPDK's JSON-RPC 2.0 unix socket.
//
// Apply reads nvmf_get_subsystems (and, for ANA, nvmf_subsystem_get_listeners)
// first and sends only the calls that change something, because SPDK
// answers most refusals, duplicates included, with a bare -32602. It
// creates the TCP transport when missing, one bdev per namespace
// (bdev_uring_create where rpc_get_methods lists it, else bdev_aio_create;
// the bdev name is derived from the device path, so a changed device is a
// changed bdev), subsystems with allow_any_host false and ana_reporting
// true, namespaces with nsid, uuid and ANA group, listeners, hosts and
// per-listener ANA states. Subsystems of the scope that are not desired
// are deleted with their bdevs.
//
// Limits of this version: DH-HMAC-CHAP keys (SPDK keyring_file_add_key +
// add_host dhchap_key) and the namespace NGUID are not sent, because the
// recorded exchanges this backend is tested against
// (../shared/spdk/rpc-transcript.jsonl, a real SPDK v26.05) contain no
// such request; a host with a key is refused with ErrNotSupported, and
// SPDK picks the NGUID (List reports it). The bdev block size is 4096.
package spdk
