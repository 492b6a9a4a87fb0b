// Package keys names every key fabraid keeps in etcd. All live under one
// prefix, /fabraid/v1/; the "v1" is the key layout's version (a layout
// change gets a new prefix and a migration), and every value is a JSON
// object with a "version" field for its own schema.
//
//	/fabraid/v1/cluster              Cluster: name, CA fingerprint, etcd member target, created
//	/fabraid/v1/nodes/<node>         registry.Node: domain, host NQN, addresses, drives (durable)
//	/fabraid/v1/alive/<node>         registry.Alive: attached to the node's lease; gone = dead
//	/fabraid/v1/tokens/<id>          token.Record: SHA-256 of the secret, expiry, use (leased)
//
// Node names are checked by the configuration (letters, digits, '.', '_',
// '-'), so they never contain '/'.
package keys

// Prefix is the root of every fabraid key.
const Prefix = "/fabraid/v1/"

// Cluster is the key of the cluster record.
const Cluster = Prefix + "cluster"

// NodesPrefix and AlivePrefix are the prefixes of the node registry.
const (
	NodesPrefix  = Prefix + "nodes/"
	AlivePrefix  = Prefix + "alive/"
	TokensPrefix = Prefix + "tokens/"
)

// Node is a node's registry record.
func Node(name string) string { return NodesPrefix + name }

// Alive is a node's liveness key.
func Alive(name string) string { return AlivePrefix + name }

// Token is a join token's record.
func Token(id string) string { return TokensPrefix + id }
