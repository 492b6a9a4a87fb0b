package token

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestParseEncodeRedact(t *testing.T) {
	tok, err := New(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(" " + tok.Encode() + "\n")
	if err != nil || back != tok {
		t.Fatalf("round trip: %+v %v, want %+v", back, err, tok)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("made", "token", tok)
	for name, out := range map[string]string{"String": tok.String(), "%v": fmt.Sprintf("%v", tok), "slog": logged.String()} {
		if strings.Contains(out, tok.Secret) || !strings.Contains(out, "<redacted>") {
			t.Errorf("%s shows the secret or no redaction: %s", name, out)
		}
	}
	for _, bad := range []string{"", tok.Encode() + ".x", strings.Replace(tok.Encode(), "fbj1", "fbj2", 1),
		tok.Encode()[:len(tok.Encode())-1], strings.Replace(tok.Encode(), tok.Secret, strings.Repeat("g", 32), 1)} {
		if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("fbj1.000000000000.00000000000000000000000000000000." + strings.Repeat("0", 64))
	f.Add("fbj1...")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(tok.Encode())
		if err != nil || again != tok {
			t.Fatalf("%q: re-parse %+v %v", s, again, err)
		}
	})
}
