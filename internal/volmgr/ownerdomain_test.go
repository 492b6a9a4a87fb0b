package volmgr

import (
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/ublk"
)

// The owner domain reaches the engine's command line of a child as
// --owner-domain, only when set: the command line without it is the one
// an older daemon ran.
func TestChildArgsOwnerDomain(t *testing.T) {
	s := EngineSpec{UUID: [16]byte{1}, Name: "v", Members: []string{"/dev/a", "/dev/b"}, UblkID: 3}
	base := []string{"engine", "--uuid", volid.Format(s.UUID), "--members", "/dev/a,/dev/b", "--ublk-id", "3", "--socket", "/s"}
	if got := childArgs(s, "/s"); !slices.Equal(got, base) {
		t.Fatalf("args without owner domain: %q, want %q", got, base)
	}
	s.OwnerDomain = "rack1"
	if got, want := childArgs(s, "/s"), append(base, "--owner-domain", "rack1"); !slices.Equal(got, want) {
		t.Fatalf("args with owner domain: %q, want %q", got, want)
	}
}

// The spec file of an engine unit carries the owner domain (owner_domain)
// through a write and a read; a spec file without it (an older daemon's)
// reads as off, and one without an owner domain does not name the key.
func TestSpecOwnerDomain(t *testing.T) {
	run := t.TempDir()
	p := SpecPath(run, "vol-0")
	s := EngineSpec{UUID: [16]byte{2}, Name: "vol-0", Members: []string{"/dev/a"}, UblkID: ublk.AnyID, OwnerDomain: "rack1"}
	if err := WriteSpec(p, specFile(s, "/s")); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpec(p)
	if err != nil || got.OwnerDomain != "rack1" {
		t.Fatalf("ReadSpec = %+v, %v; want owner domain rack1", got, err)
	}
	// An update by the engine keeps it.
	if err := UpdateSpec(p, func(f *SpecFile) { f.UblkID = 5 }); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadSpec(p); got.OwnerDomain != "rack1" || got.UblkID != 5 {
		t.Fatalf("after update: %+v", got)
	}
	s.OwnerDomain = ""
	b, _ := json.Marshal(specFile(s, "/s"))
	var keys map[string]any
	json.Unmarshal(b, &keys)
	if _, ok := keys["owner_domain"]; ok {
		t.Fatalf("spec without owner domain names it: %s", b)
	}
	os.WriteFile(p, []byte(`{"uuid":"2a41fe5d-02c3-4f6e-a0ea-405f6db4a064","name":"v","members":["/dev/x"],"socket":"/s"}`), 0o600)
	if got, err := ReadSpec(p); err != nil || got.OwnerDomain != "" {
		t.Fatalf("older spec: %+v %v, want owner domain empty", got, err)
	}
}

// A planned volume's owner domain reaches the engine: the create formats
// it with owner-domain journaling, the plan's volumes carry it to the
// EngineSpec, and the in-process assembly (what StartInProcess and the
// engine child run) covers the owner's member of each group in its
// Status; without an owner domain nothing is covered.
func TestOwnerDomainAssembly(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	v := planned(blankFiles(t, 3, 8<<20))
	v.OwnerDomain = "a"
	if _, err := m.createPlanned(v); err != nil {
		t.Fatal(err)
	}
	v.State = PlanReady
	d := m.planVolumes(&ClusterPlan{Volumes: []PlannedVolume{v}})[v.UUID]
	if d == nil || d.ownerDomain != "a" {
		t.Fatalf("plan volume: %+v, want owner domain a", d)
	}
	for _, c := range []struct {
		domain string
		want   int
	}{{d.ownerDomain, 1}, {"", 0}} {
		exec := engine.ParallelExecutor{}
		vol, err := assemble(d.members, c.domain, 0, exec, m.log)
		if err != nil {
			t.Fatal(err)
		}
		st := vol.Status()
		vol.Close()
		if st.OwnerJournal != c.want {
			t.Fatalf("owner domain %q: Status().OwnerJournal = %d, want %d", c.domain, st.OwnerJournal, c.want)
		}
	}
}
