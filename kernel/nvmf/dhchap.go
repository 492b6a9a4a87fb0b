package nvmf

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabraid/fabraid/kernel/internal/nvmesys"
)

// ErrInvalidSecret is wrapped by ParseSecret errors.
var ErrInvalidSecret = errors.New("invalid DH-HMAC-CHAP secret")

// SecretHash says how the secret is transformed before use (NVMe base
// spec 8.13.5.8 "Secret representation"): 0 none, 1 SHA-256, 2 SHA-384,
// 3 SHA-512. The key length must be 32, 48 or 64 bytes; with a hash it
// must equal the hash length.
type SecretHash uint8

const (
	SecretNoTransform SecretHash = 0
	SecretSHA256      SecretHash = 1
	SecretSHA384      SecretHash = 2
	SecretSHA512      SecretHash = 3
)

// Secret is a DH-HMAC-CHAP secret: key bytes and the transform hash.
// Reveal returns the "DHHC-1:<hh>:<base64(key || crc32(key) LE)>:" form
// that nvme-cli's gen-dhchap-key prints and the kernel's configfs
// (dhchap_key) and connect option (dhchap_secret) accept. String,
// GoString and LogValue redact the key, so a Secret printed with fmt or
// logged with slog never shows it.
type Secret struct {
	Hash SecretHash
	Key  []byte
}

// GenerateSecret returns a fresh random secret of keyLen bytes (32, 48 or
// 64) with no transform, the form interoperable with every Linux release
// that has DH-HMAC-CHAP.
func GenerateSecret(keyLen int) (Secret, error) {
	if keyLen != 32 && keyLen != 48 && keyLen != 64 {
		return Secret{}, fmt.Errorf("generate secret: key length %d, want 32, 48 or 64", keyLen)
	}
	k := make([]byte, keyLen)
	if _, err := rand.Read(k); err != nil {
		return Secret{}, fmt.Errorf("generate secret: %w", err)
	}
	return Secret{Hash: SecretNoTransform, Key: k}, nil
}

// redacted is what String, GoString and LogValue print.
func (s Secret) redacted() string { return fmt.Sprintf("DHHC-1:%02d:<redacted>:", s.Hash) }

// String is the secret with its key redacted; see Reveal.
func (s Secret) String() string { return s.redacted() }

// GoString is the secret with its key redacted (%#v).
func (s Secret) GoString() string { return "nvmf.Secret{" + s.redacted() + "}" }

// LogValue keeps the key out of slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.redacted()) }

// Reveal is the secret with its key, in the DHHC-1 form, for configfs,
// connect options and secret files only.
func (s Secret) Reveal() string {
	return fmt.Sprintf("DHHC-1:%02d:%s:", s.Hash, nvmesys.EncodeKeyText(s.Key))
}

// ParseSecret parses and checks a "DHHC-1:hh:<base64>:" secret: known
// transform, key length, CRC.
func ParseSecret(s string) (Secret, error) {
	rest, ok := strings.CutPrefix(s, "DHHC-1:")
	if !ok {
		return Secret{}, fmt.Errorf("%w: missing DHHC-1: prefix", ErrInvalidSecret)
	}
	hh, b64, ok := strings.Cut(rest, ":")
	if !ok || len(hh) != 2 || hh[0] != '0' || hh[1] < '0' || hh[1] > '3' {
		return Secret{}, fmt.Errorf("%w: bad transform field", ErrInvalidSecret)
	}
	b64 = strings.TrimSuffix(b64, ":")
	key, err := nvmesys.DecodeKeyText(b64)
	if err != nil {
		return Secret{}, fmt.Errorf("%w: %v", ErrInvalidSecret, err)
	}
	if n := len(key); n != 32 && n != 48 && n != 64 {
		return Secret{}, fmt.Errorf("%w: key length %d, want 32, 48 or 64", ErrInvalidSecret, n)
	}
	h := SecretHash(hh[1] - '0')
	if want := [...]int{0, 32, 48, 64}[h]; want != 0 && len(key) != want {
		return Secret{}, fmt.Errorf("%w: transform %d needs a %d-byte key, got %d", ErrInvalidSecret, h, want, len(key))
	}
	return Secret{Hash: h, Key: key}, nil
}

// SaveSecret writes s to path readable by root only (0600, parent
// directories 0700), replacing the file atomically.
func SaveSecret(path string, s Secret) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save secret %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secret-*")
	if err != nil {
		return fmt.Errorf("save secret %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("save secret %s: %w", path, err)
	}
	if _, err := tmp.WriteString(s.Reveal() + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("save secret %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save secret %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save secret %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save secret %s: %w", path, err)
	}
	return nil
}

// LoadSecret reads a secret saved by SaveSecret. It refuses a file that
// group or others can read.
func LoadSecret(path string) (Secret, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Secret{}, fmt.Errorf("load secret: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Secret{}, fmt.Errorf("load secret %s: mode %v is readable by others; want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Secret{}, fmt.Errorf("load secret: %w", err)
	}
	s, err := ParseSecret(strings.TrimSpace(string(b)))
	if err != nil {
		return Secret{}, fmt.Errorf("load secret %s: %w", path, err)
	}
	return s, nil
}
