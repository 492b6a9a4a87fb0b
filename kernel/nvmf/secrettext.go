package nvmf

import (
	"fmt"
	"io"
	"log/slog"
)

// SecretText is a DH-HMAC-CHAP secret in its DHHC-1 text form as it
// travels from etcd through the planners to the target and the initiator.
// fmt (every verb, alone or inside a struct, map or slice), slog and JSON
// print it as "<secret>" ("" when empty); Reveal is the text, for the
// kernel.
type SecretText string

// Reveal returns the secret's text.
func (s SecretText) Reveal() string { return string(s) }

// String is "<secret>", or "" for no secret.
func (s SecretText) String() string {
	if s == "" {
		return ""
	}
	return "<secret>"
}

// Format prints String for every verb (%x, %d and the like included).
func (s SecretText) Format(f fmt.State, _ rune) { io.WriteString(f, s.String()) }

// MarshalJSON keeps the secret out of JSON (slog's JSON handler, debug
// dumps): a SecretText is never stored or sent as JSON; etcd's host key
// records carry a plain string (model.HostKey).
func (s SecretText) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// LogValue keeps the secret out of slog output.
func (s SecretText) LogValue() slog.Value { return slog.StringValue(s.String()) }
