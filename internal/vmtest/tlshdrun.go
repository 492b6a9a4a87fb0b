package vmtest

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TLSHDConf is the tlshd configuration StartTLSHD writes: the .nvme
// keyring named under [authenticate] (tlshd links it into its session
// keyring to read the PSKs the kernel hands it by serial), errors only.
const TLSHDConf = `[debug]
loglevel=1
tls=0
nl=0

[authenticate]
keyrings=.nvme
`

// TLSModules are what kTLS needs in a guest of the kernel series (Kernel612,
// Kernel7, ...) besides nvme: the tls module and the AEADs of TLS 1.3's PSK
// suites (gcm(aes); 6.12 needs ghash_generic too, which 7.x no longer has:
// gcm(aes) needs the ctr module there). The kernel would request_module
// them, but a plain guest has no modprobe: without them tlshd's handshake
// succeeds and then "The kernel does not support the requested algorithm".
func TLSModules(series string) []string {
	if series == Kernel7 {
		return []string{"tls", "gcm", "ctr"}
	}
	return []string{"tls", "gcm", "ghash_generic"}
}

// StartTLSHD runs tlshd in the guest (its files from TLSHD in
// GuestConfig.Files) with TLSHDConf, returns once it listens for the
// kernel's handshake requests, and at the end of t stops it and logs what
// it said. Guest side only.
func StartTLSHD(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/etc/tlshd.conf", []byte(TLSHDConf), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(TLSHDPath, "-s", "-c", "/etc/tlshd.conf")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+TLSHDLibDir)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start tlshd: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			t.Logf("tlshd: %s", l)
		}
	})
	waitListening(t, cmd.Process.Pid, out)
}

// syncBuffer collects tlshd's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitListening waits until the process pid has a generic netlink socket
// (/proc/net/netlink), then a moment more: tlshd listening for the
// kernel's handshake requests. Before that the kernel finds no agent
// (ESRCH). The socket's multicast membership cannot be checked there: the
// Groups column shows only groups 1..32, and genetlink numbers its groups
// dynamically.
func waitListening(t *testing.T, pid int, out *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile("/proc/net/netlink")
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			// sk Eth Pid Groups ...; Eth 16 is NETLINK_GENERIC.
			if len(f) < 4 || f[1] != "16" {
				continue
			}
			// libnl numbers its sockets' ports pid + n<<22.
			if port, err := strconv.ParseUint(f[2], 10, 32); err == nil && int(port&0x3fffff) == pid {
				time.Sleep(500 * time.Millisecond)
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("tlshd (pid %d) opened no generic netlink socket in 20 s; it said:\n%s", pid, out.String())
}
