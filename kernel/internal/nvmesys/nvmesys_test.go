package nvmesys

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

func TestPassthruCmdSize(t *testing.T) {
	if got := unsafe.Sizeof(PassthruCmd{}); got != 72 {
		t.Fatalf("sizeof(PassthruCmd) = %d, want 72 (struct nvme_passthru_cmd)", got)
	}
	if got := unsafe.Offsetof(PassthruCmd{}.Cdw10); got != 40 {
		t.Fatalf("offsetof(cdw10) = %d, want 40", got)
	}
	// _IOWR('N', 0x41, 72 bytes)
	if want := uint32(3)<<30 | 72<<16 | 'N'<<8 | 0x41; IoctlAdminCmd != want {
		t.Fatalf("IoctlAdminCmd = %#x, want %#x", IoctlAdminCmd, want)
	}
}

func TestValidateNQN(t *testing.T) {
	for _, tt := range []struct {
		name string
		nqn  string
		ok   bool
	}{
		{"fabraid drive", "nqn.2026-11.io.fabraid:drive:S4EWNX0R123456", true},
		{"uuid", "nqn.2014-08.org.nvmexpress:uuid:0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9a9", true},
		{"discovery", DiscoveryNQN, true},
		{"no colon", "nqn.2026-11.io.fabraid", true},
		{"empty", "", false},
		{"no prefix", "iqn.2026-11.io.fabraid:x", false},
		{"bad date", "nqn.26-11.io.fabraid:x", false},
		{"bad month", "nqn.2026-13.io.fabraid:x", false},
		{"comma", "nqn.2026-11.io.fabraid:a,b", false},
		{"slash", "nqn.2026-11.io.fabraid:a/b", false},
		{"space", "nqn.2026-11.io.fabraid:a b", false},
		{"equals", "nqn.2026-11.io.fabraid:a=b", false},
		{"empty name", "nqn.2026-11.io.fabraid:", false},
		{"bad domain", "nqn.2026-11..fabraid:x", false},
		{"too long", "nqn.2026-11.io.fabraid:" + strings.Repeat("x", 201), false},
		{"max len", "nqn.2026-11.io.fabraid:" + strings.Repeat("x", 200), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateNQN(tt.nqn)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateNQN(%q) = %v, want ok=%v", tt.nqn, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidNQN) {
				t.Fatalf("error %v does not wrap ErrInvalidNQN", err)
			}
		})
	}
}

func TestUUID(t *testing.T) {
	u, err := ParseUUID("0C6F5E92-5FE1-4C4F-9D43-CD8B3A19A9A9")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u.String(), "0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9a9"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	v, err := ParseUUID("0c6f5e925fe14c4f9d43cd8b3a19a9a9")
	if err != nil || v != u {
		t.Fatalf("undashed parse = %v, %v", v, err)
	}
	for _, bad := range []string{"", "xyz", "0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9a", "0c6f5e92x5fe1-4c4f-9d43-cd8b3a19a9a9", "gc6f5e925fe14c4f9d43cd8b3a19a9a9"} {
		if _, err := ParseUUID(bad); !errors.Is(err, ErrInvalidUUID) {
			t.Errorf("ParseUUID(%q) = %v, want ErrInvalidUUID", bad, err)
		}
	}
	r, err := NewRandomUUID()
	if err != nil || r.IsZero() || r[6]>>4 != 4 {
		t.Fatalf("NewRandomUUID = %v, %v", r, err)
	}
}
