// Package fence is the storage fence's acknowledgement in etcd: a drive
// exporter records that its exports of a volume's drives allow only the
// holder of an owner epoch (Ack), and a new owner waits until every live
// exporter of its volume has done so for its epoch (Wait) before it writes.
//
// # Keys and invariants
//
// Node X's acknowledgement for volume U is keys.Fence(U, X), a Record
// {"version":1,"epoch":E,"owner":"N","at":...} on X's node lease (the
// lease of its alive key, keys.Alive(X)). X writes it only after its
// kernel state, read back, allows only N, the node holding U's owner key
// at epoch E, on every drive of U it exports, and after the drives whose
// allowed host changed were unlinked from the ports (which ends the
// controllers of every other host). Epoch 0 (owner "") says X exports U's
// drives to nobody (U has no owner key). The record states X's current
// kernel state: X rewrites it on every change, and nothing else writes it.
//
// Owner epochs only grow (they are the owner key's create revision), so an
// acknowledgement of E' >= E also shuts out every holder of an epoch
// older than E: Wait(E) counts it. Because the record lives on X's lease,
// a dead X (its alive key gone) has no acknowledgement, and Wait stops
// waiting for it: X then serves nobody, and when it comes back it reads
// the desired exports from etcd before it exports anything (package
// exporter, the daemon's exporter loop).
//
// What the fence does not cover: an exporter that is cut off from etcd
// but not from the old owner keeps its kernel state until its own daemon
// acts on the lost lease; Wait stops waiting for it once its alive key has
// expired.
package fence
