// Package cluster is a node's membership in a fabraid cluster: it makes
// the cluster (Init), lets other nodes in with join tokens (Token, the join
// service, Join), keeps the node registered and alive in etcd, reports the
// cluster (Status), and takes nodes out (Leave, Remove).
//
// The parts live in subpackages: pki (CA and certificates), token (join
// tokens), store (the embedded etcd member and membership changes),
// registry (node records and liveness), volumes (volume records, their
// owners' statuses and the nodes' DH-HMAC-CHAP host keys), plan (pure
// adapters from those records to the data-plane packages), model (the
// record types, without etcd) and keys (every etcd key).
//
// # Host key
//
// At registration the node makes its DH-HMAC-CHAP host secret once
// (HostKeyFile in Options.Dir, 0600) and publishes it in etcd; Refresh
// puts it back when it is gone. HostSecret returns it redacted-by-default
// as an nvmf.Secret.
//
// # On disk
//
// Options.Dir (state_dir/cluster) holds state.json (State), the
// certificates (pki.Files) and, on nodes that run an etcd member, etcd's
// data directory etcd/. A node without state.json is in no cluster and
// fabraidd runs it exactly as a one-node system.
//
// # Join
//
// A node joins by POSTing a JoinRequest to https://ADDR/v1/join, the join
// service of a node that runs an etcd member. It pins the server's CA by
// the fingerprint in the token, and sends the token, its name, addresses
// and a fresh public key. The server redeems the token (single use),
// refuses a name that is registered already, adds the node as an etcd
// learner when the cluster has fewer voting members than Options.Members,
// signs a node certificate and answers with a JoinReply (the CA key too
// when the node becomes a member, so it can serve joins). A member node
// starts its etcd member, promotes itself once in sync, and serves joins.
//
// Every node can write all of etcd, so the join service trusts nothing
// there to decide who gets the CA key: token records count only with a
// MAC under a key derived from the CA key (package token), and the
// voting-member target is the member's own State.Members. The joiner
// accepts only a join service that presents a member certificate
// (package pki), which etcd's peer port requires too.
//
// # External etcd
//
// With Options.External (etcd_endpoints), fabraid runs no etcd member and
// no join service: each node authenticates with the certificate its
// configuration names, creates the cluster record if there is none, and
// registers itself at start. Init and Join are refused.
//
// Node is safe for concurrent use.
package cluster
