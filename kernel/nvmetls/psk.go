package nvmetls

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"strings"

	"github.com/fabraid/fabraid/kernel/internal/nvmesys"
)

// ErrInvalidPSK is wrapped by ParsePSK and Derive errors.
var ErrInvalidPSK = errors.New("invalid NVMe TLS PSK")

// Hash names a hash function as the interchange format's hash field and
// PSK identities number them.
type Hash uint8

const (
	NoTransform Hash = 0 // interchange format only: the configured PSK is the retained PSK
	SHA256      Hash = 1 // TLS_AES_128_GCM_SHA256, 32-byte keys
	SHA384      Hash = 2 // TLS_AES_256_GCM_SHA384, 48-byte keys
)

// size is the key length a hash implies (0 for NoTransform).
func (h Hash) size() int {
	switch h {
	case SHA256:
		return 32
	case SHA384:
		return 48
	}
	return 0
}

func (h Hash) new() func() hash.Hash {
	if h == SHA384 {
		return sha512.New384
	}
	return sha256.New
}

// interchangePrefix starts a configured PSK in the interchange format.
const interchangePrefix = "NVMeTLSkey-1:"

// PSK is a configured PSK: 32 or 48 key bytes and the hash that turns it
// into the retained PSK (NoTransform: used as is). String, GoString and
// LogValue redact the key; Reveal returns the interchange form.
type PSK struct {
	Hash Hash
	Key  []byte
}

// GeneratePSK returns a fresh random configured PSK of keyLen bytes (32
// or 48) that is transformed with the hash of its length, as nvme-cli's
// gen-tls-key does by default.
func GeneratePSK(keyLen int) (PSK, error) {
	h := SHA256
	switch keyLen {
	case 32:
	case 48:
		h = SHA384
	default:
		return PSK{}, fmt.Errorf("generate NVMe TLS PSK: key length %d, want 32 or 48", keyLen)
	}
	k := make([]byte, keyLen)
	if _, err := rand.Read(k); err != nil {
		return PSK{}, fmt.Errorf("generate NVMe TLS PSK: %w", err)
	}
	return PSK{Hash: h, Key: k}, nil
}

func (p PSK) redacted() string { return fmt.Sprintf("%s%02d:<redacted>:", interchangePrefix, p.Hash) }

// String is the PSK with its key redacted; see Reveal.
func (p PSK) String() string { return p.redacted() }

// GoString is the PSK with its key redacted (%#v).
func (p PSK) GoString() string { return "nvmetls.PSK{" + p.redacted() + "}" }

// LogValue keeps the key out of slog output.
func (p PSK) LogValue() slog.Value { return slog.StringValue(p.redacted()) }

// Reveal is the PSK in the interchange format,
// "NVMeTLSkey-1:hh:<base64(key || crc32(key) little-endian)>:", for key
// files and for tools such as nvme-cli only.
func (p PSK) Reveal() string {
	return fmt.Sprintf("%s%02d:%s:", interchangePrefix, p.Hash, nvmesys.EncodeKeyText(p.Key))
}

// ParsePSK parses and checks a configured PSK in the interchange format:
// prefix, hash field 00, 01 or 02, base64, key length (32 or 48; the
// hash's length when there is one), CRC-32.
func ParsePSK(s string) (PSK, error) {
	rest, ok := strings.CutPrefix(s, interchangePrefix)
	if !ok {
		return PSK{}, fmt.Errorf("%w: missing %s prefix", ErrInvalidPSK, interchangePrefix)
	}
	hh, b64, ok := strings.Cut(rest, ":")
	if !ok || len(hh) != 2 || hh[0] != '0' || hh[1] < '0' || hh[1] > '2' {
		return PSK{}, fmt.Errorf("%w: bad hash field (want 00, 01 or 02)", ErrInvalidPSK)
	}
	b64, ok = strings.CutSuffix(b64, ":")
	if !ok {
		return PSK{}, fmt.Errorf("%w: missing final ':'", ErrInvalidPSK)
	}
	key, err := nvmesys.DecodeKeyText(b64)
	if err != nil {
		return PSK{}, fmt.Errorf("%w: %v", ErrInvalidPSK, err)
	}
	if n := len(key); n != 32 && n != 48 {
		return PSK{}, fmt.Errorf("%w: key length %d, want 32 or 48", ErrInvalidPSK, n)
	}
	h := Hash(hh[1] - '0')
	if want := h.size(); want != 0 && len(key) != want {
		return PSK{}, fmt.Errorf("%w: hash %02d needs a %d-byte key, got %d", ErrInvalidPSK, h, want, len(key))
	}
	return PSK{Hash: h, Key: append([]byte(nil), key...)}, nil
}

// Cipher is the hash of the TLS cipher suite the PSK is used with: the
// transform hash, or for NoTransform the hash of the key's length.
func (p PSK) Cipher() Hash {
	if p.Hash != NoTransform {
		return p.Hash
	}
	if len(p.Key) == 48 {
		return SHA384
	}
	return SHA256
}

// Identity is the version 0 identity of a retained PSK for the pair, the
// description the kernel searches the .nvme keyring for:
// "NVMe0R<hh> <hostnqn> <subnqn>".
func Identity(cipher Hash, hostNQN, subNQN string) string {
	return fmt.Sprintf("NVMe0R%02d %s %s", cipher, hostNQN, subNQN)
}

// Derived is what goes into the keyring for one host/subsystem pair.
type Derived struct {
	Identity string // key description
	Key      []byte // TLS PSK, the key's payload
}

// String redacts the key.
func (d Derived) String() string { return fmt.Sprintf("%s (%d-byte TLS PSK)", d.Identity, len(d.Key)) }

// LogValue keeps the key out of slog output.
func (d Derived) LogValue() slog.Value { return slog.StringValue(d.String()) }

// Derive computes the identity and TLS PSK of the pair hostNQN,
// subNQN from the configured PSK (see the package documentation).
func (p PSK) Derive(hostNQN, subNQN string) (Derived, error) {
	if n := len(p.Key); n != 32 && n != 48 {
		return Derived{}, fmt.Errorf("%w: key length %d, want 32 or 48", ErrInvalidPSK, n)
	}
	if want := p.Hash.size(); p.Hash > SHA384 || want != 0 && len(p.Key) != want {
		return Derived{}, fmt.Errorf("%w: hash %02d with a %d-byte key", ErrInvalidPSK, p.Hash, len(p.Key))
	}
	for _, nqn := range []string{hostNQN, subNQN} {
		if err := nvmesys.ValidateNQN(nqn); err != nil {
			return Derived{}, fmt.Errorf("derive NVMe TLS PSK: %w", err)
		}
		if strings.ContainsAny(nqn, " \n") {
			return Derived{}, fmt.Errorf("derive NVMe TLS PSK: NQN %q contains a space or newline", nqn)
		}
	}
	retained := p.Key
	if p.Hash != NoTransform {
		var err error
		if retained, err = expandLabel(p.Hash, p.Key, "HostNQN", hostNQN, len(p.Key)); err != nil {
			return Derived{}, fmt.Errorf("derive retained PSK: %w", err)
		}
	}
	cipher := p.Cipher()
	id := Identity(cipher, hostNQN, subNQN)
	key, err := expandLabel(cipher, retained, "nvme-tls-psk", id, len(p.Key))
	if err != nil {
		return Derived{}, fmt.Errorf("derive TLS PSK: %w", err)
	}
	return Derived{Identity: id, Key: key}, nil
}

// expandLabel is HKDF-Extract with a zero salt followed by HKDF-Expand
// with the info libnvme builds: the output length as two little-endian
// bytes, "tls13 ", label, context (no length prefixes).
func expandLabel(h Hash, secret []byte, label, context string, length int) ([]byte, error) {
	prk, err := hkdf.Extract(h.new(), secret, nil)
	if err != nil {
		return nil, err
	}
	var l [2]byte
	binary.LittleEndian.PutUint16(l[:], uint16(length))
	return hkdf.Expand(h.new(), prk, string(l[:])+"tls13 "+label+context, length)
}

// GoString redacts the key (%#v).
func (d Derived) GoString() string { return "nvmetls.Derived{" + d.String() + "}" }
