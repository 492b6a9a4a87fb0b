package volmgr

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

func blankFiles(t *testing.T, n int, size int64) []string {
	t.Helper()
	dir := t.TempDir()
	var out []string
	for i := range n {
		p := filepath.Join(dir, "m"+string(rune('0'+i)))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func planned(paths []string) PlannedVolume {
	return PlannedVolume{UUID: [16]byte{0xab, 6: 0x40, 8: 0x80, 15: 7}, Name: "cv", State: PlanCreating, Members: paths,
		Config: engine.Config{K: 2, M: 1, ChunkSize: 4096, Domains: []string{"a", "b", "c"}}}
}

// A planned volume is created with the cluster's UUID on its members; a
// member carrying a filesystem or another volume refuses the create (no
// member is touched) unless forced; a second create of a volume whose
// members hold it already reports the same member UUIDs and writes
// nothing.
func TestCreatePlanned(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	paths := blankFiles(t, 3, 8<<20)
	// An ext4 superblock magic on member 1.
	f, err := os.OpenFile(paths[1], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0x53, 0xef}, 1080)
	f.Close()
	v := planned(paths)
	if _, err := m.createPlanned(v); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "slot 1") || !strings.Contains(err.Error(), "signature at byte 1080") {
		t.Fatalf("create over an ext4 member: %v, want refused naming slot 1 and the signature", err)
	}
	if sb := readSuperblock(paths[0]); sb != nil {
		t.Fatal("a refused create wrote member 0")
	}
	v.Force = true
	ms, err := m.createPlanned(v)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		sb := readSuperblock(p)
		if sb == nil || sb.VolumeUUID != v.UUID || sb.MemberUUID != ms[i] || sb.Name != "cv" {
			t.Fatalf("member %d after create: %+v, want volume %x member %x", i, sb, v.UUID, ms[i])
		}
	}
	before, _ := os.ReadFile(paths[0])
	v.Force = false
	again, err := m.createPlanned(v)
	if err != nil || !slices.Equal(again, ms) {
		t.Fatalf("second create: %x %v, want %x", again, err, ms)
	}
	if after, _ := os.ReadFile(paths[0]); string(after) != string(before) {
		t.Fatal("second create rewrote member 0")
	}
	// The members are another volume's now: a new volume is refused.
	other := planned(paths)
	other.UUID[0] = 0xcd
	if _, err := m.createPlanned(other); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "fabraid volume cv") {
		t.Fatalf("create over volume cv's members: %v, want refused naming cv", err)
	}
	// A slot without a device is not created.
	v.Members = []string{paths[0], "", paths[2]}
	if _, err := m.createPlanned(v); err == nil || !strings.Contains(err.Error(), "slot 1 (domain b) not reachable") {
		t.Fatalf("create with slot 1 missing: %v", err)
	}
}

// A ready volume starts degraded with one member of a 2+1 group missing,
// and waits, saying which slots are missing, with two.
func TestPlanStartBlocker(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	paths := blankFiles(t, 3, 8<<20)
	v := planned(paths)
	if _, err := m.createPlanned(v); err != nil {
		t.Fatal(err)
	}
	v.State = PlanReady
	check := func(members []string, want string) {
		t.Helper()
		v.Members = members
		p := &ClusterPlan{Volumes: []PlannedVolume{v}}
		d := m.planVolumes(p)[v.UUID]
		if d == nil {
			t.Fatal("ready volume not in the plan's volumes")
		}
		err := m.startBlocker(p, d)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Fatalf("members %v: %v, want %q", members, err, want)
		}
	}
	check(paths, "")
	check([]string{paths[0], "", paths[2]}, "")
	check([]string{"", "", paths[2]}, "group 0 has 1 of its 3 members, needs 2 (missing slots 0 (a), 1 (b))")
	check([]string{"", "", ""}, "none of its 3 members is reachable")
	// A creating volume is not started.
	v.State = PlanCreating
	if len(m.planVolumes(&ClusterPlan{Volumes: []PlannedVolume{v}})) != 0 {
		t.Fatal("a creating volume is in the volumes to start")
	}
}

// The cluster export allows every node's host, with its key when the
// kernel has DH-HMAC-CHAP, on every storage address; consumers connect to
// every address of the owner.
func TestClusterExportSpec(t *testing.T) {
	exports := []Export{{UUID: [16]byte{1}, Device: "/dev/ublkb0"}, {UUID: [16]byte{2}, Device: "/dev/ublkb1"}}
	hosts := []ExportHost{{NQN: "nqn.b", Secret: "DHHC-1:00:b:"}, {NQN: "nqn.a", Secret: "DHHC-1:00:a:"}}
	s := ClusterExportSpec(exports, hosts, true, []string{"10.0.0.1", "10.0.1.1"}, 0)
	if len(s.Ports) != 2 || s.Ports[0].ID != ExportPortID || s.Ports[1].ID != ExportPortID+1 || s.Ports[1].Address != "10.0.1.1" ||
		s.Ports[0].ServiceID != "4420" || len(s.Ports[1].Subsystems) != 2 {
		t.Fatalf("ports %+v", s.Ports)
	}
	for _, sub := range s.Subsystems {
		if !slices.Equal(sub.AllowedHosts, []string{"nqn.a", "nqn.b"}) {
			t.Fatalf("%s allows %v", sub.NQN, sub.AllowedHosts)
		}
	}
	if len(s.Hosts) != 2 || s.Hosts[0].DHCHAPKey != "DHHC-1:00:b:" {
		t.Fatalf("hosts %+v", s.Hosts)
	}
	if s := ClusterExportSpec(exports, hosts, false, []string{"10.0.0.1"}, 4430); s.Hosts[0].DHCHAPKey != "" || s.Ports[0].ServiceID != "4430" {
		t.Fatalf("without auth: %+v", s)
	}
	if s := ClusterExportSpec(nil, hosts, true, []string{"10.0.0.1"}, 0); len(s.Ports)+len(s.Subsystems)+len(s.Hosts) != 0 {
		t.Fatalf("nothing to export: %+v", s)
	}
	id := nvmf.HostIdentity{NQN: "nqn.self", ID: "0b0b0b0b-0000-4000-8000-00000000000b"}
	cs, err := ConsumerConnections([]Consumer{{UUID: [16]byte{1}, Addresses: []string{"10.0.0.1", "10.0.1.1"}}}, id, "DHHC-1:00:s:")
	if err != nil || len(cs) != 2 || cs[1].Address != "10.0.1.1" || cs[0].ServiceID != "4420" || cs[0].NQN != NQN([16]byte{1}) ||
		cs[0].DHCHAPSecret != "DHHC-1:00:s:" || cs[0].HostNQN != "nqn.self" || cs[0].Timeouts == nil {
		t.Fatalf("consumer connections %+v %v", cs, err)
	}
}
