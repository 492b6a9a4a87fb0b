package nvmf

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestSecretTextNeverPrinted: every fmt verb and slog print a SecretText
// redacted, alone and inside the structs and maps the planners pass it in;
// Reveal has the text.
func TestSecretTextNeverPrinted(t *testing.T) {
	const text = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:"
	s := SecretText(text)
	if s.Reveal() != text || SecretText("").String() != "" {
		t.Fatalf("Reveal %q, empty String %q", s.Reveal(), SecretText("").String())
	}
	type host struct {
		NQN    string
		Secret SecretText
	}
	keys := map[string]SecretText{"a": s}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("plan", "secret", s, "keys", keys, "host", host{"nqn.x", s})
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("plan", "secret", s, "host", host{"nqn.x", s})
	out := []string{logged.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		out = append(out, fmt.Sprintf(verb, s), fmt.Sprintf(verb, host{"nqn.x", s}), fmt.Sprintf(verb, keys), fmt.Sprintf(verb, []SecretText{s}))
	}
	for _, o := range out {
		if strings.Contains(o, "AAAAAAAA") || strings.Contains(o, "41414141") {
			t.Errorf("printed the secret: %s", o)
		}
	}
}
