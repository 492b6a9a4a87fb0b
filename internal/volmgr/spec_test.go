package volmgr

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/kernel/ublk"
)

func testSpec(runDir string) SpecFile {
	return SpecFile{UUID: "2a41fe5d-02c3-4f6e-a0ea-405f6db4a064", Name: "vol-0", Members: []string{"/dev/vda", "/dev/vdb", "/dev/vdc"},
		UblkID: ublk.AnyID, Socket: filepath.Join(runDir, "engine-2a41fe5d-02c3-4f6e-a0ea-405f6db4a064.sock")}
}

func TestSpecRoundTrip(t *testing.T) {
	run := t.TempDir()
	p := SpecPath(run, "vol-0")
	if p != filepath.Join(run, "engines", "vol-0.json") {
		t.Fatalf("SpecPath = %s", p)
	}
	want := testSpec(run)
	if err := WriteSpec(p, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpec(p)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadSpec = %+v, %v; want %+v", got, err, want)
	}
	for path, mode := range map[string]os.FileMode{p: 0o600, SpecDir(run): 0o700 | os.ModeDir} {
		if st, err := os.Stat(path); err != nil || st.Mode() != mode {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode(), err, mode)
		}
	}
	// Missing ublk_id reads as "any".
	os.WriteFile(p, []byte(`{"uuid":"2a41fe5d-02c3-4f6e-a0ea-405f6db4a064","name":"v","members":["/dev/x"],"socket":"/s"}`), 0o600)
	if s, err := ReadSpec(p); err != nil || s.UblkID != ublk.AnyID {
		t.Errorf("without ublk_id: %+v %v", s, err)
	}
}

func TestSpecUpdateAtomic(t *testing.T) {
	run := t.TempDir()
	p := SpecPath(run, "vol-0")
	if err := WriteSpec(p, testSpec(run)); err != nil {
		t.Fatal(err)
	}
	st0, _ := os.Stat(p)
	// No change: the file is not rewritten.
	if err := UpdateSpec(p, func(s *SpecFile) { s.UblkID = ublk.AnyID }); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); !os.SameFile(st0, st) {
		t.Error("unchanged spec was rewritten")
	}
	if err := UpdateSpec(p, func(s *SpecFile) { s.UblkID = 3; s.Members[1] = "/dev/vdg" }); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpec(p)
	if err != nil || got.UblkID != 3 || got.Members[1] != "/dev/vdg" {
		t.Fatalf("after update: %+v %v", got, err)
	}
	// Replaced by rename (a reader never sees a half-written file), and no
	// temporary file is left behind.
	if st, _ := os.Stat(p); os.SameFile(st0, st) {
		t.Error("spec updated in place, not renamed over")
	}
	if ents, _ := os.ReadDir(SpecDir(run)); len(ents) != 1 {
		t.Errorf("spec dir holds %d entries, want 1", len(ents))
	}
	if err := RemoveSpec(p); err != nil {
		t.Fatal(err)
	}
	if err := RemoveSpec(p); err != nil {
		t.Errorf("second RemoveSpec: %v", err)
	}
	if err := UpdateSpec(p, func(*SpecFile) {}); err == nil {
		t.Error("UpdateSpec of a missing file succeeded")
	}
}

func TestSpecInvalid(t *testing.T) {
	run := t.TempDir()
	p := SpecPath(run, "v")
	for _, tc := range []struct{ body, want string }{
		{`{`, "unexpected end"},
		{`{"uuid":"nope","name":"v","members":["/dev/x"],"socket":"/s"}`, "uuid"},
		{`{"uuid":"2a41fe5d-02c3-4f6e-a0ea-405f6db4a064","name":"v","socket":"/s"}`, "required"},
	} {
		os.MkdirAll(SpecDir(run), 0o700)
		os.WriteFile(p, []byte(tc.body), 0o600)
		if _, err := ReadSpec(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadSpec(%s) = %v, want %q", tc.body, err, tc.want)
		}
	}
}

func TestMergeSpec(t *testing.T) {
	run := t.TempDir()
	p := SpecPath(run, "vol-0")
	want := testSpec(run)
	if got := mergeSpec(p, want); got.UblkID != ublk.AnyID {
		t.Errorf("no file: ublk %d", got.UblkID)
	}
	old := want
	old.UblkID = 4
	WriteSpec(p, old)
	want.UblkID = 1
	if got := mergeSpec(p, want); got.UblkID != 4 {
		t.Errorf("the engine's ublk id is kept: got %d", got.UblkID)
	}
	old.UUID = "00000000-0000-0000-0000-000000000001" // another volume of that name
	WriteSpec(p, old)
	if got := mergeSpec(p, want); got.UblkID != 1 {
		t.Errorf("other volume's ublk id used: %d", got.UblkID)
	}
}

func TestSpecMembers(t *testing.T) {
	st := engine.Status{Members: []engine.MemberStatus{
		{Slot: 0, Device: "/dev/vda", Role: superblock.RoleActive},
		{Slot: 1, Device: "/dev/vdb", Role: superblock.RoleFailed},
		{Slot: 2, Device: "/dev/vdg", Role: superblock.RoleRebuilding},
		{Slot: 3, Device: "", Role: superblock.RoleFailed},
	}}
	if got := specMembers(st); !reflect.DeepEqual(got, []string{"/dev/vda", "/dev/vdg"}) {
		t.Errorf("specMembers = %v", got)
	}
}

func TestChildEnv(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=1", "WATCHDOG_PID=2", "HOME=/root"})
	if !reflect.DeepEqual(got, []string{"PATH=/bin", "HOME=/root", "GODEBUG=asyncpreemptoff=1"}) {
		t.Errorf("childEnv = %v", got)
	}
	got = childEnv([]string{"GODEBUG=gctrace=1", "PATH=/bin"})
	if !reflect.DeepEqual(got, []string{"PATH=/bin", "GODEBUG=gctrace=1,asyncpreemptoff=1"}) {
		t.Errorf("childEnv with GODEBUG = %v", got)
	}
}

// The engine unit runs engines with the GODEBUG that process mode gives.
func TestEngineUnitGODEBUG(t *testing.T) {
	unit, err := os.ReadFile("../../packaging/systemd/fabraid-engine@.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "\nEnvironment=GODEBUG="+EngineGODEBUG+"\n") {
		t.Errorf("fabraid-engine@.service does not set GODEBUG=%s", EngineGODEBUG)
	}
}
