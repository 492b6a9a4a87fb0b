//go:build linux

package nvmet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/internal/nvmetest"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

const (
	testNQN    = "nqn.2026-11.io.fabraid:vol:7c1e6d0a-2a8f-4f43-9a57-3d1c2a9f0001"
	foreignNQN = "nqn.2014-08.com.example:foreign"
	nsUUID     = "7c1e6d0a-2a8f-4f43-9a57-3d1c2a9f0001"
	nsNGUID    = "7c1e6d0a2a8f4f439a573d1c2a9f0001"
)

// TestIntegrationTarget exports a virtio disk over nvme-tcp on 127.0.0.1
// and checks the reconcile contract on a real kernel: Apply converges,
// a second Apply is a no-op, a half-executed plan is finished, a changed
// spec changes exactly the difference, foreign objects are left alone and
// teardown leaves nothing of ours. The initiator connects (member
// profile), does I/O, sees the ANA change, and a host that is not allowed
// is refused. On 6.12 a loop port adds a second path to the same head.
func TestIntegrationTarget(t *testing.T) {
	for _, series := range []string{vmtest.Kernel612, vmtest.Kernel61} {
		t.Run(series, func(t *testing.T) {
			caps := vmtest.GetCaps(t, series)
			vmtest.Run(t, vmtest.Options{
				Guests: []vmtest.GuestConfig{{
					Name: "a", Kernel: series,
					Modules: nvmetest.Modules(true, true, caps.NvmetLoop),
					Disks:   []vmtest.Disk{{Size: 32 << 20}, {Size: 16 << 20}},
				}},
				Timeout: 150 * time.Second,
			}, func(t *testing.T, g *vmtest.Env) { targetGuest(t, g) })
		})
	}
}

func targetGuest(t *testing.T, g *vmtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	root := nvmet.DefaultRoot
	tg := nvmet.New(root)
	feat, err := nvmet.Probe(root, "/sys/module", tg.Own)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s nvmet features: %v", g.Kernel, feat)
	host := nvmf.NewHost()
	if sup, err := host.SupportedOptions(); err == nil {
		t.Logf("nvme-fabrics: dhchap_secret=%v tls=%v fast_io_fail_tmo=%v", sup["dhchap_secret"], sup["tls"], sup["fast_io_fail_tmo"])
	}
	_, loopErr := os.Stat("/sys/module/nvme_loop")
	loop := loopErr == nil

	id, err := nvmf.LoadHostIdentity("/etc/nvme")
	if err != nil {
		t.Fatal(err)
	}
	// A foreign subsystem and port (another tool's) must survive everything.
	for _, d := range []string{"subsystems/" + foreignNQN, "ports/7"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	spec := nvmet.Spec{
		Hosts: []nvmet.Host{{NQN: id.NQN}},
		Subsystems: []nvmet.Subsystem{{
			NQN: testNQN, Serial: "fabtest0001", Model: "fabraid", Firmware: "0.1",
			AllowedHosts: []string{id.NQN},
			Namespaces:   []nvmet.Namespace{{NSID: 1, DevicePath: g.Disks[0], UUID: nsUUID, NGUID: nsNGUID}},
		}},
		Ports: []nvmet.Port{{ID: 18001, Transport: nvmet.TCP, Address: "127.0.0.1", ServiceID: "4420", Subsystems: []string{testNQN}}},
	}
	if loop {
		spec.Ports = append(spec.Ports, nvmet.Port{ID: 18002, Transport: nvmet.Loop, Subsystems: []string{testNQN}})
	}

	// DH-HMAC-CHAP on a kernel without it fails clearly, not with a bare
	// errno, and the next Apply recovers.
	if !feat.Auth {
		authSpec := spec
		authSpec.Hosts = []nvmet.Host{{NQN: id.NQN, DHCHAPKey: nvmf.Secret{Key: make([]byte, 32)}.Reveal()}}
		_, err := tg.Apply(authSpec)
		if !errors.Is(err, nvmet.ErrNotSupported) {
			t.Fatalf("apply with a DH-HMAC-CHAP key without kernel support: %v, want ErrNotSupported", err)
		}
		t.Logf("as expected: %v", err)
	}

	// A crash half-way: execute half the plan, then Apply finishes it.
	p, err := tg.Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Execute(p[:len(p)/2]); err != nil {
		t.Fatalf("half plan: %v", err)
	}
	rest, err := tg.Apply(spec)
	if err != nil {
		t.Fatalf("apply after half: %v\n%s", err, rest)
	}
	if len(rest) == 0 || len(rest) > len(p) {
		t.Fatalf("apply after a half plan did %d ops of %d", len(rest), len(p))
	}
	if again, err := tg.Plan(spec); err != nil || len(again) != 0 {
		t.Fatalf("second plan not empty (%v):\n%s", err, again)
	}
	// A DH-HMAC-CHAP key set, then removed: configfs cannot clear a key,
	// so the host is recreated; the connect below proves it has no key.
	if feat.Auth {
		keyed := spec
		keyed.Hosts = []nvmet.Host{{NQN: id.NQN, DHCHAPKey: nvmf.Secret{Key: make([]byte, 32)}.Reveal()}}
		if _, err := tg.Apply(keyed); err != nil {
			t.Fatal(err)
		}
		cleared, err := tg.Apply(spec)
		if err != nil {
			t.Fatalf("clearing the key: %v\n%s", err, cleared)
		}
		t.Logf("key cleared by:\n%s", cleared)
		if again, err := tg.Plan(spec); err != nil || len(again) != 0 {
			t.Fatalf("plan after clearing the key not empty (%v):\n%s", err, again)
		}
	}
	st, err := tg.Read()
	if err != nil {
		t.Fatal(err)
	}
	sub := findSub(st, testNQN)
	if sub == nil || sub.AllowAnyHost || sub.Serial != "fabtest0001" || sub.Model != "fabraid" ||
		(feat.Firmware && sub.Firmware != "0.1") || len(sub.Namespaces) != 1 || sub.Namespaces[0].Disabled ||
		sub.Namespaces[0].UUID != nsUUID {
		t.Fatalf("read back %+v", sub)
	}

	// A host that is not allowed is refused.
	other := nvmf.Options{Transport: nvmf.TCP, Address: "127.0.0.1", ServiceID: "4420", NQN: testNQN,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000aa", HostID: "00000000-0000-4000-8000-0000000000aa"}
	if c, err := host.Connect(other); err == nil {
		host.Disconnect(c.Name)
		t.Fatalf("host %s not in allowed_hosts connected", other.HostNQN)
	} else {
		t.Logf("refused as expected: %v", err)
	}

	prof, _ := nvmf.Profile(nvmf.ProfileMember)
	opts := nvmf.Options{Transport: nvmf.TCP, Address: "127.0.0.1", ServiceID: "4420", NQN: testNQN,
		HostNQN: id.NQN, HostID: id.ID, Timeouts: &prof}
	c, err := host.Connect(opts)
	if err != nil {
		t.Fatal(err)
	}
	if c, err = host.WaitPaths(ctx, c.Name, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller %+v", c)
	if c.State != "live" || c.Transport != "tcp" || c.SubsystemNQN != testNQN || c.Address.TrAddr != "127.0.0.1" ||
		c.Timeouts != prof || c.HostNQN != id.NQN {
		t.Errorf("controller as sysfs shows it: %+v", c)
	}
	// Importer reconcile on a real controller: timeouts changed in sysfs
	// are seen, planned back and converged.
	vp, _ := nvmf.Profile(nvmf.ProfileVolumePath)
	if err := host.SetTimeouts(c.Name, vp); err != nil {
		t.Fatal(err)
	}
	cs, err := host.Sysfs.Controllers()
	if err != nil {
		t.Fatal(err)
	}
	cp := nvmf.PlanConnections([]nvmf.Options{opts}, cs, tg.Own.SubsystemPrefix)
	if len(cp.Connect) != 0 || len(cp.Disconnect) != 0 || len(cp.Retime) != 1 || cp.Retime[0].Name != c.Name {
		t.Fatalf("connection plan after retiming to volume-path: %+v", cp)
	}
	if err := host.SetTimeouts(cp.Retime[0].Name, cp.Retime[0].Timeouts); err != nil {
		t.Fatal(err)
	}
	cs, _ = host.Sysfs.Controllers()
	if cp := nvmf.PlanConnections([]nvmf.Options{opts}, cs, tg.Own.SubsystemPrefix); !cp.Empty() {
		t.Fatalf("connection plan not empty after converging: %+v", cp)
	}
	head := "/dev/" + c.Paths[0].Head
	if b, _ := os.ReadFile("/sys/block/" + c.Paths[0].Head + "/uuid"); strings.TrimSpace(string(b)) != nsUUID {
		t.Errorf("head uuid %q, want %s", b, nsUUID)
	}
	if err := nvmetest.WritePattern(head, 1, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := nvmetest.CheckPattern(head, 1, 0, 1<<20); err != nil {
		t.Fatal(err)
	}

	if loop {
		lc, err := host.Connect(nvmf.Options{Transport: nvmf.Loop, NQN: testNQN, HostNQN: id.NQN, HostID: id.ID})
		if err != nil {
			t.Fatalf("loop connect: %v", err)
		}
		if lc, err = host.WaitPaths(ctx, lc.Name, 1); err != nil {
			t.Fatal(err)
		}
		if lc.Paths[0].Head != c.Paths[0].Head || lc.Subsystem != c.Subsystem {
			t.Errorf("loop path %+v is not a second path of head %s", lc.Paths[0], c.Paths[0].Head)
		}
		subs, _ := host.Sysfs.Subsystems()
		t.Logf("subsystems: %+v", subs)
		if err := host.Disconnect(lc.Name); err != nil {
			t.Fatal(err)
		}
		if err := nvmetest.CheckPattern(head, 1, 0, 1<<20); err != nil {
			t.Fatalf("after removing the loop path: %v", err)
		}
	}

	// A changed spec changes exactly the difference.
	changed := spec
	changed.Subsystems = slices.Clone(spec.Subsystems)
	changed.Subsystems[0].Namespaces = append(slices.Clone(spec.Subsystems[0].Namespaces),
		nvmet.Namespace{NSID: 2, DevicePath: g.Disks[1], ANAGroup: 2})
	changed.Ports = slices.Clone(spec.Ports)
	changed.Ports[0].ANAStates = map[uint32]nvmet.ANAState{1: nvmet.NonOptimized, 2: nvmet.Optimized}
	ns2 := "subsystems/" + testNQN + "/namespaces/2"
	want := strings.Join([]string{
		"mkdir " + ns2,
		"write " + ns2 + `/device_path = "` + g.Disks[1] + `"`,
		"write " + ns2 + `/ana_grpid = "2"`,
		"write " + ns2 + `/enable = "1"`,
		`write ports/18001/ana_groups/1/ana_state = "non-optimized"`,
		"mkdir ports/18001/ana_groups/2",
		`write ports/18001/ana_groups/2/ana_state = "optimized"`,
	}, "\n") + "\n"
	done, err := tg.Apply(changed)
	if err != nil {
		t.Fatal(err)
	}
	if done.String() != want {
		t.Fatalf("changed spec applied\n%s\nwant exactly\n%s", done, want)
	}
	if again, err := tg.Plan(changed); err != nil || len(again) != 0 {
		t.Fatalf("plan after change not empty (%v):\n%s", err, again)
	}
	nvmetest.Eventually(t, 20*time.Second, "ANA change seen by the host", func() error {
		cc, err := host.Sysfs.Controller(c.Name)
		if err != nil {
			return err
		}
		if len(cc.Paths) != 2 {
			return fmt.Errorf("%d paths", len(cc.Paths))
		}
		if cc.Paths[0].ANAState != "non-optimized" || cc.Paths[1].ANAState != "optimized" || cc.Paths[1].ANAGroup != 2 {
			return fmt.Errorf("paths %+v", cc.Paths)
		}
		if _, err := os.Stat("/dev/" + cc.Paths[1].Head); err != nil {
			return err
		}
		c = cc
		return nil
	})
	head2 := "/dev/" + c.Paths[1].Head
	if err := nvmetest.WritePattern(head2, 2, 4096, 256<<10); err != nil {
		t.Fatal(err)
	}
	if err := nvmetest.CheckPattern(head2, 2, 4096, 256<<10); err != nil {
		t.Fatal(err)
	}
	if err := nvmetest.CheckPattern(head, 1, 0, 1<<20); err != nil {
		t.Fatal(err)
	}

	if err := host.Disconnect(c.Name); err != nil {
		t.Fatal(err)
	}
	nvmetest.Eventually(t, 20*time.Second, "controller removed", func() error {
		if _, err := os.Stat("/sys/class/nvme/" + c.Name); err == nil {
			return fmt.Errorf("%s still there", c.Name)
		}
		return nil
	})

	// Teardown leaves nothing of ours, and the foreign objects.
	if _, err := tg.Apply(nvmet.Spec{}); err != nil {
		t.Fatal(err)
	}
	st, err = tg.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Hosts) != 0 || len(st.Subsystems) != 1 || st.Subsystems[0].NQN != foreignNQN || len(st.Ports) != 1 || st.Ports[0].ID != 7 {
		t.Fatalf("after teardown: %+v", st.Spec)
	}
	for _, d := range []string{"subsystems/" + foreignNQN, "ports/7"} {
		if err := os.Remove(filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
}

func findSub(st nvmet.State, nqn string) *nvmet.Subsystem {
	for i := range st.Subsystems {
		if st.Subsystems[i].NQN == nqn {
			return &st.Subsystems[i]
		}
	}
	return nil
}
