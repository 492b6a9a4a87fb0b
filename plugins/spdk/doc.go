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
// true, namespaces with nsid, uuid, nguid and ANA group, listeners, hosts
// and per-listener ANA states. Subsystems of the scope that are not
// desired are deleted with their bdevs.
//
// The NGUID is sent as 32 upper-case hex digits (the form
// nvmf_get_subsystems reports; SPDK's nvmf_subsystem_add_ns decodes
// exactly 32 hex digits). No recorded exchange carries it: the test double
// accepts it as the one parameter taken from SPDK's documentation rather
// than from the record (see double_test.go).
//
// Limit of this version: DH-HMAC-CHAP keys (SPDK keyring_file_add_key +
// add_host dhchap_key) are not sent: rpc_get_methods of the recorded target
// lists the keyring methods, but no recorded exchange shows how it answers
// them, so a host with a key is refused with ErrNotSupported. The bdev
// block size is 4096.
package spdk
