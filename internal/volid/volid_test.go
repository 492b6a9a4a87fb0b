package volid

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseUUID(t *testing.T) {
	u, err := ParseUUID("2A41FE5D-02c3-4f6e-a0ea-405f6db4a064")
	if err != nil || Format(u) != "2a41fe5d-02c3-4f6e-a0ea-405f6db4a064" {
		t.Errorf("ParseUUID: %v %v", Format(u), err)
	}
	for _, s := range []string{"", "2a41fe5d02c34f6ea0ea405f6db4a064", "2a41fe5d-02c3-4f6e-a0ea-405f6db4a06g", "2a41fe5d-02c34-f6e-a0ea-405f6db4a064"} {
		if _, err := ParseUUID(s); err == nil {
			t.Errorf("ParseUUID(%q) succeeded", s)
		}
	}
}

func TestUUIDString(t *testing.T) {
	b := [16]byte{0x2a, 0x41, 0xfe, 0x5d, 0x02, 0xc3, 0x4f, 0x6e, 0xa0, 0xea, 0x40, 0x5f, 0x6d, 0xb4, 0xa0, 0x64}
	if got := fmt.Sprint(UUID(b)); got != "2a41fe5d-02c3-4f6e-a0ea-405f6db4a064" {
		t.Errorf("Sprint(UUID) = %s", got)
	}
	// Assignable both ways, as the volume manager's [16]byte keys need.
	var u UUID = b
	var back [16]byte = u
	if back != b || NQN(b) != "nqn.2026-11.io.fabraid:vol:2a41fe5d-02c3-4f6e-a0ea-405f6db4a064" {
		t.Errorf("NQN = %s", NQN(b))
	}
}

func TestParseNQN(t *testing.T) {
	u := UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if got, err := ParseNQN(NQN(u)); err != nil || got != u {
		t.Errorf("ParseNQN(NQN(u)) = %v, %v", got, err)
	}
	for _, s := range []string{"", NQNPrefix, "nqn.2026-11.io.fabraid:drive:" + Format(u), NQNPrefix + strings.ToUpper(Format(u)), NQN(u) + "x", "x" + NQN(u)} {
		if _, err := ParseNQN(s); err == nil {
			t.Errorf("ParseNQN(%q) succeeded", s)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"vol0", "vol-0", "a.b_c:d", "ü", "..", strings.Repeat("x", 32)} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 33), "a b", "a/b", "a\tb", `a"b`, "a'b", `a\b`, "a$HOME", "a\x01b", "a\xffb"} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
}

func TestCheckNewName(t *testing.T) {
	for _, ok := range []string{"vol0", "vol-0", "db_1", "_x", "a.b-c", "V", strings.Repeat("x", 32)} {
		if err := CheckNewName(ok); err != nil {
			t.Errorf("CheckNewName(%q): %v", ok, err)
		}
	}
	// Names that collapse into another's link (udev turns what it does
	// not keep into '_'), look like options or directories, or hide
	// characters.
	for _, bad := range []string{"", strings.Repeat("x", 33), "db:1", "db;1", "db,1", "--help", "-x", ".", "..", ".hidden",
		"ü", "vol\u200b0", "vol\u202e0", "a b", "a/b", "a$HOME", "a\x01b", "a\xffb"} {
		if err := CheckNewName(bad); err == nil {
			t.Errorf("CheckNewName(%q) accepted", bad)
		}
	}
}
