package exporter

import "github.com/fabraid/fabraid/kernel/nvmf"

// Rekey is an announced rotation of one host's DH-HMAC-CHAP host secret
// (docs/cluster.md, "Key rotation"): the host keeps presenting Old until
// every target it connects to has New, so a target's host entry changes
// from Old to New in place, and the host's live controllers, authenticated
// with Old, stay. Both are DHHC-1 forms; they print redacted.
type Rekey struct {
	Old, New nvmf.SecretText
}

// Rekeys are the announced rotations by host NQN.
type Rekeys map[string]Rekey

// KeyChangeFences says whether a host entry's DH-HMAC-CHAP key going from
// have to want must end the controllers of that host: any change does,
// except the announced one (r, ok) from its old key to its new key, and
// except its completion (have is already New). Pure.
func KeyChangeFences(have, want string, r Rekey, ok bool) bool {
	if have == want {
		return false
	}
	return !(ok && want == r.New.Reveal() && have == r.Old.Reveal())
}
