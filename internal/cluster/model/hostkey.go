package model

// HostKeyAckVersion is the schema version of HostKeyAck.
const HostKeyAckVersion = 1

// HostKeyAck is the value at keys.HostKeyAck(node, by): node by's target
// has node's pending host key (HostKey.PendingSecret) on every host entry
// of node, drive and volume exports alike (or has no entry of node), read
// back after applying it. Fingerprint names that key without revealing
// it (volumes.HostKeyFingerprint).
type HostKeyAck struct {
	Version     int    `json:"version"`
	Fingerprint string `json:"fingerprint"`
}
