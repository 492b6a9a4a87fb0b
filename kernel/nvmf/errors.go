package nvmf

import "errors"

// ErrNotSupported is wrapped when the kernel lacks an option fabraid
// asked for (DH-HMAC-CHAP without NVME_HOST_AUTH, tls without
// NVME_TCP_TLS), detected from the option list /dev/nvme-fabrics prints.
var ErrNotSupported = errors.New("not supported by this kernel")

// Connect failures, wrapped together with the errno (errors.Is works for
// both). The errnos are those Linux 6.12 and 6.1 return through
// /dev/nvme-fabrics, observed in the guest tests.
var (
	// ErrRefused: the target answered and refused: host not in
	// allowed_hosts, no such subsystem on that port (EIO), or nothing
	// listening (ECONNREFUSED). Retrying will not help until the target's
	// configuration changes.
	ErrRefused = errors.New("refused by the target")
	// ErrAuth: DH-HMAC-CHAP failed: the target wants a key and none was
	// given (ENOKEY), or a key was wrong (EKEYREJECTED).
	ErrAuth = errors.New("DH-HMAC-CHAP authentication failed")
	// ErrUnreachable: no answer (ETIMEDOUT, EHOSTUNREACH, ENETUNREACH):
	// retry with backoff.
	ErrUnreachable = errors.New("target unreachable")
)

// ErrAlreadyConnected is wrapped when a controller to the same subsystem
// and address exists and DuplicateConnect was not set (EALREADY).
var ErrAlreadyConnected = errors.New("already connected")
