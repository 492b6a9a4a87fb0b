package nvmesys

import (
	"errors"
	"fmt"
	"strings"
)

// Sizes from include/linux/nvme.h.
const (
	// NQNMaxLen is the longest NQN the NVMe base specification allows
	// (section 4.5: 223 bytes), NVMF_NQN_SIZE in the kernel.
	NQNMaxLen = 223
	// TrsvcidSize and TraddrSize bound the transport service id and
	// address (NVMF_TRSVCID_SIZE, NVMF_TRADDR_SIZE).
	TrsvcidSize = 32
	TraddrSize  = 256

	// DiscoveryNQN is the well-known discovery subsystem NQN
	// (NVME_DISC_SUBSYS_NAME).
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
	// UUIDNQNPrefix prefixes NQNs built from a UUID (NVMe base spec 4.5).
	UUIDNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"
)

// ErrInvalidNQN is returned (wrapped) by ValidateNQN.
var ErrInvalidNQN = errors.New("invalid NQN")

// ValidateNQN checks that s is an NVMe Qualified Name that can be used both
// as a configfs directory name (kernel/nvmet) and inside a comma-separated
// /dev/nvme-fabrics option string (kernel/nvmf):
//
//   - "nqn." followed by a yyyy-mm date, a '.' and a reverse domain name,
//     then optionally ':' and a free-form string (NVMe base spec 4.5);
//   - at most NQNMaxLen bytes;
//   - printable ASCII only, and none of ',', '/', '=' or whitespace, which
//     would break option strings, configfs names or sysfs parsing.
//
// Errors wrap ErrInvalidNQN.
func ValidateNQN(s string) error {
	if len(s) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidNQN)
	}
	if len(s) > NQNMaxLen {
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidNQN, len(s), NQNMaxLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == ',' || c == '/' || c == '=' {
			return fmt.Errorf("%w: %q: byte %#x at offset %d not allowed", ErrInvalidNQN, s, c, i)
		}
	}
	if !strings.HasPrefix(s, "nqn.") {
		return fmt.Errorf("%w: %q: must start with \"nqn.\"", ErrInvalidNQN, s)
	}
	rest := s[4:]
	// yyyy-mm.
	if len(rest) < 8 || !digits(rest[0:4]) || rest[4] != '-' || !digits(rest[5:7]) || rest[7] != '.' {
		return fmt.Errorf("%w: %q: want nqn.yyyy-mm.<reverse domain>[:<name>]", ErrInvalidNQN, s)
	}
	if m := (rest[5]-'0')*10 + rest[6] - '0'; m < 1 || m > 12 {
		return fmt.Errorf("%w: %q: month %s out of range", ErrInvalidNQN, s, rest[5:7])
	}
	domain := rest[8:]
	if i := strings.IndexByte(domain, ':'); i >= 0 {
		if i+1 == len(domain) {
			return fmt.Errorf("%w: %q: empty name after ':'", ErrInvalidNQN, s)
		}
		domain = domain[:i]
	}
	if domain == "" || domain[0] == '.' || domain[len(domain)-1] == '.' {
		return fmt.Errorf("%w: %q: bad reverse domain name %q", ErrInvalidNQN, s, domain)
	}
	for i := 0; i < len(domain); i++ {
		c := domain[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("%w: %q: bad reverse domain name %q", ErrInvalidNQN, s, domain)
		}
	}
	return nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
