package nvmf

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecret(t *testing.T) {
	for _, n := range []int{32, 48, 64} {
		s, err := GenerateSecret(n)
		if err != nil {
			t.Fatal(err)
		}
		str := s.Reveal()
		back, err := ParseSecret(str)
		if err != nil {
			t.Fatalf("ParseSecret(%q): %v", str, err)
		}
		if !bytes.Equal(back.Key, s.Key) || back.Hash != s.Hash {
			t.Fatalf("round trip changed the secret")
		}
	}
	if _, err := GenerateSecret(16); err == nil {
		t.Error("16-byte key accepted")
	}
	// A known vector: 32 zero bytes; CRC-32 (IEEE) of them is 0x190a55ad,
	// stored little-endian.
	zero := Secret{Key: make([]byte, 32)}.Reveal()
	if want := "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:"; zero != want {
		t.Fatalf("zero secret = %s, want %s", zero, want)
	}
	for _, bad := range []string{
		"", "DHHC-2:00:AAAA:", "DHHC-1:04:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:",
		"DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoa:", // CRC
		"DHHC-1:00:AAAA:", // length
		"DHHC-1:02:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:", // sha384 needs 48 bytes
		"DHHC-1:00:!!!!:",
	} {
		if _, err := ParseSecret(bad); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("ParseSecret(%q) = %v, want ErrInvalidSecret", bad, err)
		}
	}
}

func TestSaveLoadSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys", "host.key")
	s, _ := GenerateSecret(32)
	if err := SaveSecret(p, s); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if di, _ := os.Stat(filepath.Dir(p)); di.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, want 0700", di.Mode().Perm())
	}
	back, err := LoadSecret(p)
	if err != nil || !bytes.Equal(back.Key, s.Key) {
		t.Fatalf("LoadSecret = %v, %v", back, err)
	}
	os.Chmod(p, 0o644)
	if _, err := LoadSecret(p); err == nil {
		t.Fatal("world-readable secret accepted")
	}
}

// TestSecretRedacted: printing or logging a Secret never shows its key
// (String used to return the whole DHHC-1 secret).
func TestSecretRedacted(t *testing.T) {
	s := Secret{Key: bytes.Repeat([]byte{0x42}, 32)}
	key := s.Reveal()
	b64 := strings.Split(key, ":")[2]
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	log.Info("connect", "secret", s)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("connect", "secret", s)
	for name, out := range map[string]string{
		"String": s.String(), "%v": fmt.Sprintf("%v", s), "%s": fmt.Sprintf("%s", s),
		"%+v": fmt.Sprintf("%+v", s), "%#v": fmt.Sprintf("%#v", s), "slog": logged.String(),
		"%v of a pointer": fmt.Sprintf("%v", &s),
	} {
		if strings.Contains(out, b64) {
			t.Errorf("%s shows the key: %s", name, out)
		}
		if !strings.Contains(out, "redacted") {
			t.Errorf("%s = %q, want it marked redacted", name, out)
		}
	}
	if back, err := ParseSecret(key); err != nil || !bytes.Equal(back.Key, s.Key) {
		t.Fatalf("Reveal does not round-trip: %v", err)
	}
}
