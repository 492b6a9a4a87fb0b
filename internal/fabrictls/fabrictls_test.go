package fabrictls

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

var (
	hostB  = "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b"
	hostC  = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0000-4000-8000-00000000000c"
	drive1 = "nqn.2026-11.io.fabraid:drive:a-disk0"
	drive2 = "nqn.2026-11.io.fabraid:drive:a-disk1"
	secB   = nvmf.SecretText(nvmf.Secret{Key: bytes.Repeat([]byte{0xb0}, 32)}.Reveal())
	secC   = nvmf.SecretText(nvmf.Secret{Key: bytes.Repeat([]byte{0xc0}, 32)}.Reveal())
)

func TestParseMode(t *testing.T) {
	for _, s := range []string{"off", "on", "required"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "yes", "true", "ON", "require"} {
		if _, err := ParseMode(s); err == nil || !strings.Contains(err.Error(), "want off, on or required") {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
	}
}

// TestPairKey: the exporter (from the host's secret as etcd has it) and
// the importer (from its own file) compute the same key for a pair; other
// pairs and other secrets give other keys.
func TestPairKey(t *testing.T) {
	key := func(sec nvmf.SecretText, host, sub string) []byte {
		t.Helper()
		d, err := PairKey(sec, host, sub)
		if err != nil {
			t.Fatal(err)
		}
		if want := "NVMe0R01 " + host + " " + sub; d.Identity != want || len(d.Key) != 32 {
			t.Fatalf("identity %q (%d-byte key), want %q", d.Identity, len(d.Key), want)
		}
		return d.Key
	}
	target := key(nvmf.SecretText(string(secB)), hostB, drive1) // a copy, as read from etcd
	host := key(secB, hostB, drive1)
	if !bytes.Equal(target, host) {
		t.Fatal("the two ends derive different keys for one pair")
	}
	seen := map[string]string{hex.EncodeToString(host): "b/drive1"}
	for name, k := range map[string][]byte{
		"b/drive2":          key(secB, hostB, drive2),
		"c/drive1":          key(secC, hostC, drive1),
		"c's NQN, b secret": key(secB, hostC, drive1),
		"b's NQN, c secret": key(secC, hostB, drive1),
	} {
		h := hex.EncodeToString(k)
		if prev, ok := seen[h]; ok {
			t.Errorf("%s and %s get the same key", name, prev)
		}
		seen[h] = name
	}
	if _, err := PairKey("", hostB, drive1); err == nil || !strings.Contains(err.Error(), "no DH-HMAC-CHAP secret") {
		t.Errorf("no secret: %v", err)
	}
	if _, err := PairKey(secB, "host with space", drive1); err == nil {
		t.Error("an NQN with a space was taken")
	}
}

// TestPairKeyRedacted: neither the configured PSK nor the derived key
// shows in any print or log of them.
func TestPairKeyRedacted(t *testing.T) {
	p, err := PairPSK(secB, hostB, drive1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := PairKey(secB, hostB, drive1)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	l := slog.New(slog.NewTextHandler(&logged, nil))
	l.Info("keys", "psk", p, "derived", d)
	l.Info("keys", "derived_struct", struct{ D any }{d})
	out := fmt.Sprintf("%v %+v %#v %s %v %+v %#v %s", p, p, p, p, d, d, d, d) + logged.String()
	for _, k := range [][]byte{p.Key, d.Key} {
		goSyntax := fmt.Sprintf("0x%x, 0x%x, 0x%x", k[0], k[1], k[2]) // %#v of a []byte
		for _, enc := range []string{hex.EncodeToString(k), base64.StdEncoding.EncodeToString(k)[:20], fmt.Sprint(k)[:20], string(k), goSyntax} {
			if strings.Contains(out, enc) {
				t.Fatalf("a key shows in %q", out)
			}
		}
	}
	if !strings.Contains(out, "<redacted>") || !strings.Contains(out, "NVMe0R01 ") {
		t.Fatalf("printed %q: want the identity and <redacted>", out)
	}
}

func TestTarget(t *testing.T) {
	all := Support{Kernel: true, Keyring: true, TLSHD: true}
	for _, c := range []struct {
		m       Mode
		s       Support
		want    string
		refused string // substring of the error; "" no error
	}{
		{Off, all, PortsPlain, ""},
		{Off, Support{}, PortsPlain, ""},
		{On, all, PortsOptional, ""},
		{On, Support{Kernel: true, Keyring: true}, PortsPlain, ""},
		{Required, all, PortsRequired, ""},
		{Required, Support{Keyring: true, TLSHD: true}, PortsPlain, "NVME_TARGET_TCP_TLS"},
		{Required, Support{Kernel: true, Keyring: true}, PortsPlain, "tlshd"},
		{Required, Support{Kernel: true, TLSHD: true}, PortsPlain, "nvme_keyring"},
	} {
		got, err := Target(c.m, c.s)
		if got != c.want || (err == nil) != (c.refused == "") || err != nil && (!strings.Contains(err.Error(), c.refused) || !errors.Is(err, ErrRequired)) {
			t.Errorf("Target(%s, %+v) = %q, %v; want %q, error with %q", c.m, c.s, got, err, c.want, c.refused)
		}
	}
}

func TestHost(t *testing.T) {
	all := Support{Kernel: true, Keyring: true, TLSHD: true}
	noTLSHD := Support{Kernel: true, Keyring: true}
	for _, c := range []struct {
		m       Mode
		s       Support
		ports   string
		tls     bool
		refused string
	}{
		{Off, all, PortsPlain, false, ""},
		{Off, all, PortsOptional, false, ""},
		{Off, all, PortsRequired, false, "nvme_tls = off here"},
		{Off, Support{}, PortsRequired, false, "nvme_tls = off here"},
		{On, all, PortsPlain, false, ""},
		{On, all, PortsOptional, true, ""},
		{On, all, PortsRequired, true, ""},
		{On, noTLSHD, PortsOptional, false, ""},
		{On, noTLSHD, PortsRequired, false, "tlshd"},
		{Required, all, PortsRequired, true, ""},
		{Required, all, PortsOptional, true, ""},
		{Required, all, PortsPlain, false, "offers no TLS"},
		{Required, Support{Keyring: true, TLSHD: true}, PortsRequired, false, "NVME_TCP_TLS"},
	} {
		got, err := Host(c.m, c.s, c.ports)
		if got != c.tls || (err == nil) != (c.refused == "") || err != nil && !strings.Contains(err.Error(), c.refused) {
			t.Errorf("Host(%s, %+v, %q) = %v, %v; want %v, error with %q", c.m, c.s, c.ports, got, err, c.tls, c.refused)
		}
	}
}

// TestStaleKeys: only well-formed identities that owned claims and keep
// lacks are stale, each once, sorted.
func TestStaleKeys(t *testing.T) {
	keep := []nvmetls.Derived{{Identity: "NVMe0R01 h1 s1"}}
	present := []string{"NVMe0R01 h1 s2", "NVMe0R01 h1 s1", "NVMe0R02 h1 s0", "NVMe0R01 h2 s3", "NVMe0R01 h1", "other h1 s4", "NVMe0R01 h1 s2"}
	owned := func(h, s string) bool { return h == "h1" }
	got := StaleKeys(present, keep, owned)
	if want := []string{"NVMe0R01 h1 s2", "NVMe0R02 h1 s0"}; !slices.Equal(got, want) {
		t.Errorf("StaleKeys = %q, want %q", got, want)
	}
	if h, s, ok := SplitIdentity(nvmetls.Identity(nvmetls.SHA256, "nqn.h", "nqn.s")); !ok || h != "nqn.h" || s != "nqn.s" {
		t.Errorf("SplitIdentity of nvmetls.Identity: %q %q %v", h, s, ok)
	}
}

// TestInKeyring: of the psk keys with one identity, only the live one
// linked into the keyring is listed; a key of another keyring, a revoked
// member and a member of another type are not.
func TestInKeyring(t *testing.T) {
	id := "NVMe0R01 h1 s1"
	keys := []nvmetls.ProcKey{
		{ID: 1, Flags: "I--Q---", Type: "keyring", Description: nvmetls.KeyringName},
		{ID: 2, Flags: "I--Q---", Type: "psk", Description: id},               // in .nvme
		{ID: 3, Flags: "I--Q---", Type: "psk", Description: id},               // a test's keyring
		{ID: 4, Flags: "IR-Q---", Type: "psk", Description: id},               // revoked member
		{ID: 5, Flags: "I--Q---", Type: "user", Description: id},              // not a psk
		{ID: 6, Flags: "I--Q---", Type: "psk", Description: "NVMe0R01 h2 s2"}, // another member
	}
	got := InKeyring(keys, []int{2, 4, 5, 6, 99})
	var ids []int
	for _, k := range got {
		ids = append(ids, k.ID)
	}
	if want := []int{2, 6}; !slices.Equal(ids, want) {
		t.Errorf("InKeyring = %v, want %v", ids, want)
	}
	if len(InKeyring(keys, nil)) != 0 {
		t.Error("InKeyring of an empty keyring lists keys")
	}
}
