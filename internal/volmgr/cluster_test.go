package volmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/volid"
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

// A ready volume of the plan goes through the start gate with the members
// found on the plan's devices: complete, it starts; with one member of
// its 2+1 group missing it waits, then starts degraded after the
// assembly timeout; with two it never starts and says so.
func TestPlanVolumesGate(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), opts: Options{Config: config.Config{StateDir: t.TempDir(), AssemblyTimeout: time.Minute}}}
	paths := blankFiles(t, 3, 8<<20)
	v := planned(paths)
	if _, err := m.createPlanned(v); err != nil {
		t.Fatal(err)
	}
	v.State = PlanReady
	now := time.Unix(1000, 0)
	m.gate.now = func() time.Time { return now }
	check := func(members []string, want string) {
		t.Helper()
		v.Members = members
		d := m.planVolumes(&ClusterPlan{Volumes: []PlannedVolume{v}})[v.UUID]
		if d == nil {
			t.Fatal("ready volume not in the plan's volumes")
		}
		err := m.gateCheck(v.UUID, d)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Fatalf("members %v: %v, want %q", members, err, want)
		}
	}
	check(paths, "")
	check([]string{paths[0], "", paths[2]}, "waiting")
	// A member on a dead node (a takeover) is not waited for.
	v.Gone = []int{1}
	check([]string{paths[0], "", paths[2]}, "")
	check([]string{"", "", paths[2]}, "1 of")
	v.Gone = nil
	now = now.Add(2 * time.Minute)
	check([]string{paths[0], "", paths[2]}, "")
	check([]string{"", "", paths[2]}, "1 of")
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
	if len(s) != 2 {
		t.Fatalf("exports %+v", s)
	}
	for _, e := range s {
		ls := e.Listeners
		if len(ls) != 2 || ls[0].PortID != ExportPortID || ls[1].PortID != ExportPortID+1 || ls[1].Address != "10.0.1.1" || ls[0].ServiceID != "4420" {
			t.Fatalf("%s listeners %+v", e.NQN, ls)
		}
		if len(e.Hosts) != 2 || e.Hosts[0].NQN != "nqn.a" || string(e.Hosts[0].DHCHAPKey) != "DHHC-1:00:a:" || e.Hosts[1].NQN != "nqn.b" {
			t.Fatalf("%s hosts %+v", e.NQN, e.Hosts)
		}
	}
	if s := ClusterExportSpec(exports, hosts, false, []string{"10.0.0.1"}, 4430); s[0].Hosts[0].DHCHAPKey != "" || s[0].Listeners[0].ServiceID != "4430" {
		t.Fatalf("without auth: %+v", s)
	}
	if s := ClusterExportSpec(nil, hosts, true, []string{"10.0.0.1"}, 0); len(s) != 0 {
		t.Fatalf("nothing to export: %+v", s)
	}
	// An attach list (Export.Hosts) admits its hosts only; empty: none.
	attached := []Export{{UUID: [16]byte{1}, Device: "/dev/ublkb0", Hosts: []string{"nqn.b"}}, {UUID: [16]byte{2}, Device: "/dev/ublkb1", Hosts: []string{}}}
	s = ClusterExportSpec(attached, hosts, true, []string{"10.0.0.1"}, 0)
	if len(s[0].Hosts) != 1 || s[0].Hosts[0].NQN != "nqn.b" || string(s[0].Hosts[0].DHCHAPKey) != "DHHC-1:00:b:" || len(s[1].Hosts) != 0 {
		t.Fatalf("attached exports: %+v", s)
	}
	id := nvmf.HostIdentity{NQN: "nqn.self", ID: "0b0b0b0b-0000-4000-8000-00000000000b"}
	cs, err := ConsumerConnections([]Consumer{{UUID: [16]byte{1}, Addresses: []string{"10.0.0.1", "10.0.1.1"}}}, id, "DHHC-1:00:s:")
	if err != nil || len(cs) != 2 || cs[1].Address != "10.0.1.1" || cs[0].ServiceID != "4420" || cs[0].NQN != volid.NQN([16]byte{1}) ||
		cs[0].DHCHAPSecret != "DHHC-1:00:s:" || cs[0].HostNQN != "nqn.self" || cs[0].Timeouts == nil {
		t.Fatalf("consumer connections %+v %v", cs, err)
	}
	if cs[0].DHCHAPCtrlSecret != "" {
		t.Fatal("a consumer without the owner's controller key asks for one")
	}
}

// TestCtrlKeys: with a controller secret, every volume export host that
// has a key gets it as its controller key (the drive exporter puts the
// same one on the same host entries), a host without a key gets none;
// consumers pass the owner's controller secret only with a host secret.
// Nothing prints either.
func TestCtrlKeys(t *testing.T) {
	const ctrl = "DHHC-1:00:ctrl:"
	exports := []Export{{UUID: [16]byte{1}, Device: "/dev/ublkb0"}}
	hosts := []ExportHost{{NQN: "nqn.b", Secret: "DHHC-1:00:b:"}, {NQN: "nqn.a"}}
	s := WithCtrlKey(ClusterExportSpec(exports, hosts, true, []string{"10.0.0.1"}, 0), ctrl)
	if string(s[0].Hosts[1].DHCHAPCtrlKey) != ctrl || s[0].Hosts[0].DHCHAPCtrlKey != "" {
		t.Fatalf("controller keys: b %v, a (no host key) %v", s[0].Hosts[1].DHCHAPCtrlKey == ctrl, s[0].Hosts[0].DHCHAPCtrlKey != "")
	}
	if s := WithCtrlKey(ClusterExportSpec(exports, hosts, true, []string{"10.0.0.1"}, 0), ""); s[0].Hosts[1].DHCHAPCtrlKey != "" {
		t.Fatal("no controller secret: a controller key set")
	}
	id := nvmf.HostIdentity{NQN: "nqn.self", ID: "0b0b0b0b-0000-4000-8000-00000000000b"}
	c := []Consumer{{UUID: [16]byte{1}, Addresses: []string{"10.0.0.1"}, CtrlSecret: ctrl}}
	cs, err := ConsumerConnections(c, id, "DHHC-1:00:s:")
	if err != nil || cs[0].DHCHAPCtrlSecret != ctrl {
		t.Fatalf("consumer with the owner's controller key: %v", err)
	}
	if cs, _ := ConsumerConnections(c, id, ""); cs[0].DHCHAPCtrlSecret != "" {
		t.Fatal("controller secret without a host secret")
	}
	p := ClusterPlan{Consumers: c, CtrlSecret: ctrl, Secret: "DHHC-1:00:s:"}
	if out := fmt.Sprintf("%v %+v %#v", p, p, s); strings.Contains(out, "ctrl") {
		t.Fatalf("a plan prints the controller secret: %s", out)
	}
}

// Small members get finer write-intent regions (a partial resync after a
// node's return stays partial); large ones the engine's default.
func TestRegionSize(t *testing.T) {
	for _, c := range []struct{ size, want int64 }{
		{64 << 20, 1 << 20}, {1 << 30, 16 << 20}, {1 << 40, engine.DefaultRegionSize}, {0, engine.DefaultRegionSize}, {8 << 20, 1 << 20},
	} {
		if got := regionSize(c.size); got != c.want {
			t.Errorf("regionSize(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}

// Without DH-HMAC-CHAP in the target, ReconcileCluster's warning that the
// exports allow hosts by NQN alone comes once per export set (volumes
// and hosts), not every reconcile, and again after auth came and went;
// Info's export_auth follows the plan.
func TestWarnUnauthenticated(t *testing.T) {
	var logged strings.Builder
	m := &Manager{log: slog.New(slog.NewTextHandler(&logged, nil))}
	count := func() int { return strings.Count(logged.String(), "exports unauthenticated") }
	p := ClusterPlan{Volumes: []PlannedVolume{{Name: "v1"}}, Hosts: []ExportHost{{NQN: "nqn.a"}, {NQN: "nqn.b"}}}
	for range 3 {
		m.warnUnauthenticated(&p)
	}
	if n := count(); n != 1 || !strings.Contains(logged.String(), "CONFIG_NVME_TARGET_AUTH") {
		t.Fatalf("%d warnings after 3 reconciles of one export set, want 1 naming the kernel option:\n%s", n, logged.String())
	}
	p.Hosts = append(p.Hosts, ExportHost{NQN: "nqn.c"})
	m.warnUnauthenticated(&p)
	m.warnUnauthenticated(&p)
	if n := count(); n != 2 {
		t.Fatalf("%d warnings after a host joined, want 2", n)
	}
	p.Auth = true
	m.warnUnauthenticated(&p)
	if n := count(); n != 2 || exportAuth(&p) != api.ExportAuthDHCHAP {
		t.Fatalf("with auth: %d warnings, export auth %q", n, exportAuth(&p))
	}
	p.Auth = false
	m.warnUnauthenticated(&p)
	if n := count(); n != 3 || exportAuth(&p) != api.ExportAuthHostNQN || exportAuth(nil) != "" {
		t.Fatalf("auth lost again: %d warnings (want 3), export auth %q", n, exportAuth(&p))
	}
	if strings.Contains(logged.String(), "nqn.a") {
		t.Errorf("the warning lists host NQNs (a count is enough):\n%s", logged.String())
	}
}
