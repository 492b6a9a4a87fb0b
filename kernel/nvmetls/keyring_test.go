package nvmetls

import (
	"encoding/binary"
	"strings"
	"testing"
)

// A /proc/keys of a 6.12 guest with a PSK in the .nvme keyring.
const procKeys = `0b5cbe3c I--Q---     1 perm 3f030000     0     0 keyring   .nvme: 1
1d2e7a2f I--Q---     2 perm 3f1b0000     0     0 psk       NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001 nqn.2026-12.io.fabraid:test: 32
2a8b1f11 I--Q---     1 perm 1f3f0000     0 65534 keyring   _uid.0: empty
33aa0001 I------     1 perm 3f010000     0     0 asymmetri x: X509.rsa []
short line
zzzzzzzz I--Q---     1 perm 3f030000     0     0 keyring   bad: 1
`

func TestParseProcKeys(t *testing.T) {
	keys, err := ParseProcKeys(strings.NewReader(procKeys))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 {
		t.Fatalf("parsed %d keys, want 4: %+v", len(keys), keys)
	}
	if id := FindKey(keys, "keyring", KeyringName); id != 0x0b5cbe3c {
		t.Errorf(".nvme keyring = %x", id)
	}
	id := "NVMe0R01 " + testHost + " " + testSub
	if got := FindKey(keys, "psk", id); got != 0x1d2e7a2f {
		t.Errorf("psk %q = %x; keys %+v", id, got, keys)
	}
	if FindKey(keys, "keyring", ".nvme2") != 0 || FindKey(keys, "psk", ".nvme") != 0 {
		t.Error("found a key that is not there")
	}
}

func FuzzParseProcKeys(f *testing.F) {
	f.Add(procKeys)
	f.Add("1 a b c d e f keyring : :\n")
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseProcKeys(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, k := range keys {
			if k.ID <= 0 || k.Type == "" {
				t.Fatalf("bad key %+v", k)
			}
		}
	})
}

// TestLive: /proc/keys flags (I instantiated, R revoked, D dead, Q quota,
// U under construction, N negative, i invalidated); a revoked key is
// still listed until collected and must not count.
func TestLive(t *testing.T) {
	for flags, want := range map[string]bool{"I--Q---": true, "I------": true, "IR-Q---": false, "I-DQ---": false, "---QU--": false, "I--Q-N-": false, "I--Q--i": false} {
		if got := (ProcKey{Flags: flags}).Live(); got != want {
			t.Errorf("Live(%s) = %v, want %v", flags, got, want)
		}
	}
	keys, err := ParseProcKeys(strings.NewReader("1d2e7a2f IR-Q---     2 perm 3f1b0000     0     0 psk       NVMe0R01 h s: 32\n"))
	if err != nil || len(keys) != 1 || keys[0].Flags != "IR-Q---" || keys[0].Live() {
		t.Errorf("a revoked psk parsed as %+v (%v)", keys, err)
	}
}

// TestSerials: KEYCTL_READ's serials, in the host's byte order; a
// trailing partial serial is dropped.
func TestSerials(t *testing.T) {
	b := binary.NativeEndian.AppendUint32(nil, 0x0b5cbe3c)
	b = binary.NativeEndian.AppendUint32(b, 0x1d2e7a2f)
	got := Serials(append(b, 0xff, 0xff))
	if len(got) != 2 || got[0] != 0x0b5cbe3c || got[1] != 0x1d2e7a2f {
		t.Errorf("Serials = %x", got)
	}
	if len(Serials(nil)) != 0 {
		t.Error("Serials of nothing")
	}
}
