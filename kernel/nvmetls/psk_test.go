package nvmetls

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const (
	testHost = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"
	testSub  = "nqn.2026-12.io.fabraid:test"
)

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// The expected values were computed independently (Python's hmac and
// hashlib, RFC 5869 written out) from the derivation in doc.go.
func TestDeriveKnownAnswers(t *testing.T) {
	for _, tc := range []struct {
		psk      PSK
		identity string
		key      string
	}{
		{PSK{Hash: SHA256, Key: seq(32)}, "NVMe0R01 " + testHost + " " + testSub,
			"3939e3efbadd4894600dd00da0405be42a79a338aaf01d6403eb812370c5e4e2"},
		{PSK{Hash: SHA384, Key: seq(48)}, "NVMe0R02 " + testHost + " " + testSub,
			"5a991170d255af9a0d4565e0d06cdf6bd0bdd52e8d378dbbfbf02687b572552642e88d89d2f96b6c520eb4a6ca75a4f5"},
		{PSK{Hash: NoTransform, Key: seq(32)}, "NVMe0R01 " + testHost + " " + testSub,
			"a613f7ec698a3c7b7490d65571803aeef58f7a5df2f140de813f28cec773320b"},
	} {
		d, err := tc.psk.Derive(testHost, testSub)
		if err != nil {
			t.Fatal(err)
		}
		if d.Identity != tc.identity || hex.EncodeToString(d.Key) != tc.key {
			t.Errorf("%v: got %q %x, want %q %s", tc.psk, d.Identity, d.Key, tc.identity, tc.key)
		}
		if strings.Contains(d.String(), hex.EncodeToString(d.Key[:4])) {
			t.Errorf("Derived.String shows key bytes: %s", d)
		}
	}
}

func TestInterchangeFormat(t *testing.T) {
	p := PSK{Hash: SHA256, Key: seq(32)}
	const want = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	if got := p.Reveal(); got != want {
		t.Fatalf("Reveal = %q, want %q", got, want)
	}
	back, err := ParsePSK(want)
	if err != nil || back.Hash != SHA256 || hex.EncodeToString(back.Key) != hex.EncodeToString(p.Key) {
		t.Fatalf("ParsePSK = %v %v", back, err)
	}
	for _, s := range []string{
		"", "DHHC-1:01:AAAA:", "NVMeTLSkey-1:03:" + want[16:], "NVMeTLSkey-1:1:" + want[16:],
		strings.TrimSuffix(want, ":"), strings.Replace(want, "AAEC", "AAED", 1), // CRC
		"NVMeTLSkey-1:02:" + want[16:], // SHA-384 needs 48 bytes
		"NVMeTLSkey-1:01:AAAA:", "NVMeTLSkey-1:01:not base64!:",
	} {
		if _, err := ParsePSK(s); !errors.Is(err, ErrInvalidPSK) {
			t.Errorf("ParsePSK(%q) = %v, want ErrInvalidPSK", s, err)
		}
	}
}

func TestGenerateAndRedact(t *testing.T) {
	for _, n := range []int{32, 48} {
		p, err := GeneratePSK(n)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParsePSK(p.Reveal())
		if err != nil || back.Hash != p.Hash || string(back.Key) != string(p.Key) {
			t.Fatalf("round trip of a %d-byte PSK: %v", n, err)
		}
		secret := p.Reveal()[16:30]
		var log strings.Builder
		slog.New(slog.NewTextHandler(&log, nil)).Info("x", "psk", p)
		for _, s := range []string{p.String(), fmt.Sprintf("%v %+v %#v %s", p, p, p, p), log.String()} {
			if strings.Contains(s, secret) || !strings.Contains(s, "redacted") {
				t.Errorf("printed PSK shows its key or no redaction: %s", s)
			}
		}
	}
	if _, err := GeneratePSK(64); err == nil {
		t.Error("GeneratePSK(64) succeeded")
	}
}

func TestDeriveRefuses(t *testing.T) {
	good := PSK{Hash: SHA256, Key: seq(32)}
	for name, f := range map[string]func() (Derived, error){
		"short key":   func() (Derived, error) { return PSK{Key: seq(16)}.Derive(testHost, testSub) },
		"hash/length": func() (Derived, error) { return PSK{Hash: SHA384, Key: seq(32)}.Derive(testHost, testSub) },
		"bad hash":    func() (Derived, error) { return PSK{Hash: 3, Key: seq(32)}.Derive(testHost, testSub) },
		"bad host":    func() (Derived, error) { return good.Derive("host one", testSub) },
		"empty sub":   func() (Derived, error) { return good.Derive(testHost, "") },
	} {
		if d, err := f(); err == nil {
			t.Errorf("%s: derived %s", name, d)
		}
	}
}

func FuzzParsePSK(f *testing.F) {
	f.Add("NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:")
	f.Add(PSK{Hash: SHA384, Key: seq(48)}.Reveal())
	f.Add(PSK{Hash: NoTransform, Key: seq(48)}.Reveal())
	f.Add("NVMeTLSkey-1:00::")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePSK(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidPSK) {
				t.Fatalf("error does not wrap ErrInvalidPSK: %v", err)
			}
			return
		}
		if got := p.Reveal(); got != s {
			t.Fatalf("Reveal(ParsePSK(%q)) = %q", s, got)
		}
		if _, err := p.Derive(testHost, testSub); err != nil {
			t.Fatalf("a parsed PSK does not derive: %v", err)
		}
	})
}
