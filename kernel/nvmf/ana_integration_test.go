//go:build linux

package nvmf_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/internal/nvmetest"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// The planned move's subsystems: volume V is exported by both targets
// (a from its disk, b from its nvme-tcp import of a's disk, so both
// paths see the same bytes) with the same NSID, UUID and NGUID; V2 is a's
// only, for the no-path measurements; V3 is exported by both with the
// same controller id range.
var (
	anaHost = nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:0d0d0d0d-0000-4000-8000-00000000000d", ID: "0d0d0d0d-0000-4000-8000-00000000000d"}
	anaB    = nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-0000000000bb", ID: "0b0b0b0b-0000-4000-8000-0000000000bb"}

	anaDrive = "nqn.2026-11.io.fabraid:drive:anadisk"
	anaV     = "nqn.2026-11.io.fabraid:vol:7a7a7a7a-0000-4000-8000-000000000001"
	anaV2    = "nqn.2026-11.io.fabraid:vol:7a7a7a7a-0000-4000-8000-000000000002"
	anaV3    = "nqn.2026-11.io.fabraid:vol:7a7a7a7a-0000-4000-8000-000000000003"
)

// anaStep is one state of the test: the ANA state of V's group on each
// target ("" = V not exported there) and, on a, V2's export: the ANA state
// of its group, whether its port (18002, a's second service id) exists
// and whether V2 is linked on it. expect is what the host checks for V.
type anaStep struct {
	name     string
	a, b     nvmet.ANAState
	v2       nvmet.ANAState
	v2NoPort bool
	v2Unlink bool
	expect   string
}

// The steps. V is in ANA group 2 on a's port and in group 3 on b's: each
// node has its own group for the volume, so a state change touches only
// that volume on that node's port (nvmet keeps ANA state per port and
// group, and one port carries all of a node's volumes).
var anaSteps = []anaStep{
	{name: "old-only", a: nvmet.Optimized, v2: nvmet.Optimized},
	{name: "new-inaccessible", a: nvmet.Optimized, b: nvmet.Inaccessible, v2: nvmet.Optimized, expect: "io-on-a"},
	{name: "new-nonoptimized", a: nvmet.Optimized, b: nvmet.NonOptimized, v2: nvmet.Optimized, expect: "io-on-a"},
	{name: "old-inaccessible", a: nvmet.Inaccessible, b: nvmet.NonOptimized, v2: nvmet.Optimized, expect: "io-on-b"},
	{name: "both-inaccessible", a: nvmet.Inaccessible, b: nvmet.Inaccessible, v2: nvmet.Optimized, expect: "paused"},
	{name: "new-optimized", a: nvmet.Inaccessible, b: nvmet.Optimized, v2: nvmet.Optimized, expect: "io-on-b"},
	{name: "old-removed", b: nvmet.Optimized, v2: nvmet.Optimized, expect: "continues"},
	// V2 has one path (a, port 18002).
	{name: "v2-inaccessible", b: nvmet.Optimized, v2: nvmet.Inaccessible},
	{name: "v2-optimized", b: nvmet.Optimized, v2: nvmet.Optimized},
	{name: "v2-port-removed", b: nvmet.Optimized, v2: nvmet.Optimized, v2NoPort: true},
	{name: "v2-port-back", b: nvmet.Optimized, v2: nvmet.Optimized},
	{name: "v2-port-removed-finite", b: nvmet.Optimized, v2: nvmet.Optimized, v2NoPort: true},
	{name: "v2-port-back-2", b: nvmet.Optimized, v2: nvmet.Optimized},
	// a still listens on the port but no longer exports V2 there.
	{name: "v2-unlinked", b: nvmet.Optimized, v2: nvmet.Optimized, v2Unlink: true},
}

// anaSpec is target guest's spec at step i. Controller ids: a hands out
// 1..999 and b 1000..1998 for V; V3 hands out only id 500 on both.
func anaSpec(g *vmtest.Env, i int, dev string) nvmet.Spec {
	st := anaSteps[i]
	s := nvmet.Spec{Hosts: []nvmet.Host{{NQN: anaHost.NQN}}}
	port := nvmet.Port{ID: 18001, Transport: nvmet.TCP, Address: g.Addr(g.Name), ServiceID: "4420"}
	vol := func(nqn, dev, uuid string, grp uint32, lo, hi uint16) nvmet.Subsystem {
		return nvmet.Subsystem{NQN: nqn, Model: "fabraid volume", Serial: "anatest", CntlIDMin: lo, CntlIDMax: hi,
			AllowedHosts: []string{anaHost.NQN},
			Namespaces:   []nvmet.Namespace{{NSID: 1, DevicePath: dev, UUID: uuid, NGUID: strings.ReplaceAll(uuid, "-", ""), ANAGroup: grp}}}
	}
	state, grp, lo := st.a, uint32(2), uint16(1)
	if g.Name == "a" {
		s.Hosts = append(s.Hosts, nvmet.Host{NQN: anaB.NQN})
		s.Subsystems = append(s.Subsystems, nvmet.Subsystem{NQN: anaDrive, AllowedHosts: []string{anaB.NQN},
			Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: g.Disks[0]}}})
		port.Subsystems = append(port.Subsystems, anaDrive)
		s.Subsystems = append(s.Subsystems, vol(anaV2, g.Disks[1], "7a7a7a7a-0000-4000-8000-000000000002", 4, 0, 0))
		if !st.v2NoPort {
			p2 := nvmet.Port{ID: 18002, Transport: nvmet.TCP, Address: g.Addr(g.Name), ServiceID: "4421",
				ANAStates: map[uint32]nvmet.ANAState{1: nvmet.Optimized, 4: st.v2}}
			// V3 keeps the port enabled (nvmet stops listening on a
			// port with no subsystem linked) when V2 is unlinked.
			p2.Subsystems = []string{anaV3}
			if !st.v2Unlink {
				p2.Subsystems = append(p2.Subsystems, anaV2)
			}
			s.Ports = append(s.Ports, p2)
		}
	} else {
		state, grp, lo = st.b, 3, 1000
	}
	// nvmet takes controller ids from one allocator for all subsystems
	// (lowest free in the subsystem's range), so two targets collide by
	// chance; V3's range of one id makes them collide for sure.
	s.Subsystems = append(s.Subsystems, vol(anaV3, dev, "7a7a7a7a-0000-4000-8000-000000000003", 1, 500, 500))
	port.Subsystems = append(port.Subsystems, anaV3)
	port.ANAStates = map[uint32]nvmet.ANAState{1: nvmet.Optimized}
	if state != "" {
		s.Subsystems = append(s.Subsystems, vol(anaV, dev, "7a7a7a7a-0000-4000-8000-000000000001", grp, lo, lo+998))
		port.Subsystems = append(port.Subsystems, anaV)
		port.ANAStates[grp] = state
	}
	s.Ports = append(s.Ports, port)
	return s
}

// TestIntegrationANASwitchover shows the planned move's switchover with
// real nvmet targets and the Linux host (three 6.12 guests): a and b
// export volume V with the same NQN/NSID/UUID/NGUID on their own
// addresses (b's bytes are a's disk imported over nvme-tcp), each in its
// own ANA group; host h connects both paths (one multipath head, volume-
// path profile) and runs a write+read verifier through every step of
// anaSteps, reading each path's ana_state in sysfs and which path carried
// the writes. Then it measures what the host does when V2's only path
// loses its subsystem: with the volume-path profile the I/O waits (no
// error) and resumes when the export returns; with a finite ctrl_loss_tmo
// the controller is deleted and the queued I/O fails. And that two
// targets handing out the same controller ids for one NQN cannot both be
// connected (V3).
func TestIntegrationANASwitchover(t *testing.T) {
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{
			{Name: "a", Kernel: vmtest.Kernel612, Modules: nvmetest.Modules(true, false, false),
				Disks: []vmtest.Disk{{Size: 32 << 20}, {Size: 16 << 20}}},
			{Name: "b", Kernel: vmtest.Kernel612, Modules: nvmetest.Modules(true, true, false)},
			{Name: "h", Kernel: vmtest.Kernel612, Modules: nvmetest.Modules(false, true, false)},
		},
		Timeout: 300 * time.Second,
	}, func(t *testing.T, g *vmtest.Env) {
		switch g.Name {
		case "a", "b":
			anaTarget(t, g)
		case "h":
			anaInitiator(t, g)
		}
	})
}

func anaTarget(t *testing.T, g *vmtest.Env) {
	tg := nvmet.New("")
	dev := ""
	if g.Name == "a" {
		dev = g.Disks[0]
	} else {
		// b's copy of the volume is a's disk over nvme-tcp.
		g.Wait(t, "a", "done-0")
		h := nvmf.NewHost()
		tmo, _ := nvmf.Profile(nvmf.ProfileMember)
		c, err := h.Connect(nvmf.Options{Transport: nvmf.TCP, Address: g.Addr("a"), ServiceID: "4420", NQN: anaDrive,
			HostNQN: anaB.NQN, HostID: anaB.ID, Timeouts: &tmo})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := contextTimeout(30 * time.Second)
		defer cancel()
		if c, err = h.WaitPaths(ctx, c.Name, 1); err != nil {
			t.Fatal(err)
		}
		dev = "/dev/" + c.Paths[0].Head
		t.Logf("b exports a's disk imported as %s", dev)
	}
	for i, st := range anaSteps {
		if i > 0 || g.Name == "b" {
			g.Wait(t, "h", fmt.Sprintf("step-%d", i))
		}
		if g.Name == "b" && i == 0 {
			g.Signal(t, "done-0")
			continue // b exports from step 1
		}
		start := time.Now()
		done, err := tg.Apply(anaSpec(g, i, dev))
		if err != nil {
			t.Fatalf("step %s: apply: %v\ndone:\n%s", st.name, err, done)
		}
		t.Logf("step %s: applied in %.3f s:\n%s", st.name, time.Since(start).Seconds(), done)
		g.Signal(t, fmt.Sprintf("done-%d", i))
	}
	g.Wait(t, "h", "finished")
	if g.Name == "a" {
		// Can a controller id range change while a host is connected
		// (h still has V3's controller)? Up, then back down.
		spec := anaSpec(g, len(anaSteps)-1, dev)
		for _, lo := range []uint16{2000, 600} {
			for i := range spec.Subsystems {
				if spec.Subsystems[i].NQN == anaV3 {
					spec.Subsystems[i].CntlIDMin, spec.Subsystems[i].CntlIDMax = lo, lo+10
				}
			}
			done, err := tg.Apply(spec)
			t.Logf("FACT V3 controller id range -> %d..%d with a host connected: %v\n%s", lo, lo+10, err, done)
			if err != nil {
				t.Errorf("changing a controller id range of a connected subsystem: %v", err)
			}
		}
	}
}

func anaInitiator(t *testing.T, g *vmtest.Env) {
	ctx, cancel := contextTimeout(280 * time.Second)
	defer cancel()
	h := nvmf.NewHost()
	vp, _ := nvmf.Profile(nvmf.ProfileVolumePath)
	opt := func(nqn, target string) nvmf.Options {
		return nvmf.Options{Transport: nvmf.TCP, Address: g.Addr(target), ServiceID: "4420", NQN: nqn,
			HostNQN: anaHost.NQN, HostID: anaHost.ID, Timeouts: &vp}
	}
	connect := func(nqn, target string) nvmf.Controller {
		t.Helper()
		c, err := h.Connect(opt(nqn, target))
		if err != nil {
			t.Fatalf("connect %s at %s: %v", nqn, target, err)
		}
		if c, err = h.WaitPaths(ctx, c.Name, 1); err != nil {
			t.Fatal(err)
		}
		return c
	}
	step := func(i int) time.Time {
		t.Helper()
		g.Signal(t, fmt.Sprintf("step-%d", i))
		for _, tg := range []string{"a", "b"} {
			g.Wait(t, tg, fmt.Sprintf("done-%d", i))
		}
		return time.Now()
	}
	anaOf := func(c nvmf.Controller) string {
		cc, err := h.Sysfs.Controller(c.Name)
		if err != nil || len(cc.Paths) == 0 {
			return fmt.Sprintf("? (%v)", err)
		}
		return cc.Paths[0].ANAState
	}
	waitANA := func(c nvmf.Controller, want nvmet.ANAState) {
		t.Helper()
		nvmetest.Eventually(t, 20*time.Second, c.Name+" ana_state "+string(want), func() error {
			if s := anaOf(c); s != string(want) {
				return fmt.Errorf("%s", s)
			}
			return nil
		})
	}

	step(0)
	pa := connect(anaV, "a")
	head := "/dev/" + pa.Paths[0].Head
	v := startVerifier(head, 21, 8<<20)
	var pb nvmf.Controller
	for i := 1; i < len(anaSteps) && !strings.HasPrefix(anaSteps[i].name, "v2-"); i++ {
		st := anaSteps[i]
		at := step(i)
		if i == 1 {
			// V3: both targets hand out controller id 500.
			c3 := connect(anaV3, "a")
			if c, err := h.Connect(opt(anaV3, "b")); err == nil {
				t.Errorf("a second controller with a duplicate controller id connected: %+v (cntlid %d, first %d)", c, c.CntlID, c3.CntlID)
			} else {
				t.Logf("FACT same NQN, both targets cntlid 500: second connect refused: %v", err)
			}
			pb = connect(anaV, "b")
			if pb.Paths[0].Head != pa.Paths[0].Head {
				t.Fatalf("two heads for one volume: %s and %s", pa.Paths[0].Head, pb.Paths[0].Head)
			}
			cc, _ := h.Sysfs.Controller(pb.Name)
			t.Logf("b's path %s (cntlid %d, a's %d) joined head %s", pb.Paths[0].Name, cc.CntlID, pa.CntlID, head)
		}
		if st.a != "" {
			waitANA(pa, st.a)
		}
		waitANA(pb, st.b)
		seen := time.Since(at)
		n0, wa0, wb0 := v.progress(), pathWritesOr0(pa), pathWritesOr0(pb)
		time.Sleep(2 * time.Second)
		n1, wa1, wb1 := v.progress(), pathWritesOr0(pa), pathWritesOr0(pb)
		if st.a == "" {
			wa1 = wa0 // a's path is gone: its counter no longer moves
		}
		t.Logf("STEP %-18s a=%-13s b=%-13s host sees it %.2f s after the apply; 2 s: verifier +%d blocks, writes a +%d, b +%d",
			st.name, anaOf(pa), anaOf(pb), seen.Seconds(), n1-n0, wa1-wa0, wb1-wb0)
		switch st.expect {
		case "io-on-a":
			if n1-n0 < 2 || wa1-wa0 < 2 || wb1 != wb0 {
				t.Errorf("step %s: want I/O on a only", st.name)
			}
		case "io-on-b":
			if n1-n0 < 2 || wb1-wb0 < 2 || wa1 != wa0 {
				t.Errorf("step %s: want I/O on b only", st.name)
			}
		case "continues":
			// The host deletes a's controller (a answers the reconnect
			// with "invalid subsystem", DNR); I/O goes on on b.
			nvmetest.Eventually(t, 30*time.Second, "I/O goes on after a's path is removed", func() error {
				if v.progress() < n0+8 {
					return fmt.Errorf("verifier at %d (from %d)", v.progress(), n0)
				}
				return nil
			})
			t.Logf("STEP %s: 8 more blocks %.2f s after the apply", st.name, time.Since(at).Seconds())
		case "paused":
			if n1-n0 > 1 || wa1-wa0 > 1 || wb1-wb0 > 1 {
				t.Errorf("step %s: want I/O paused (no usable path)", st.name)
			}
		}
		if st.name == "new-optimized" {
			// How long the pause ends after b became optimized.
			t.Logf("SWITCHOVER resume: verifier moving %.2f s after b's optimized state was applied", seen.Seconds())
		}
		if err := v.error(); err != nil {
			t.Fatalf("step %s: I/O error: %v", st.name, err)
		}
	}
	n, verr := v.stop()
	if verr != nil {
		t.Fatalf("I/O error during the switchover: %v", verr)
	}
	if err := v.checkAll(); err != nil {
		t.Fatal(err)
	}
	_, err := os.Stat("/sys/class/nvme/" + pa.Name)
	t.Logf("verifier: %d blocks written and verified through the switchover; a's controller %s deleted by the host after a stopped exporting V: %v", n, pa.Name, err != nil)
	logHeadAttrs(t, head)

	// No path available: V2's only path (a, port 18002).
	stepOf := func(name string) int {
		return slices.IndexFunc(anaSteps, func(s anaStep) bool { return s.name == name })
	}
	o2 := opt(anaV2, "a")
	o2.ServiceID = "4421"
	connect2 := func() (nvmf.Controller, *verifier) {
		t.Helper()
		c, err := h.Connect(o2)
		if err != nil {
			t.Fatalf("connect V2: %v", err)
		}
		if c, err = h.WaitPaths(ctx, c.Name, 1); err != nil {
			t.Fatal(err)
		}
		v := startVerifier("/dev/"+c.Paths[0].Head, 22, 4<<20)
		time.Sleep(500 * time.Millisecond)
		return c, v
	}
	// stalls checks that V2's I/O waits without error for 8 s after step
	// name and logs the controller's state.
	stalls := func(name string, c nvmf.Controller, v *verifier) {
		t.Helper()
		step(stepOf(name))
		n0 := v.progress()
		time.Sleep(8 * time.Second)
		n1 := v.progress()
		cc, err := h.Sysfs.Controller(c.Name)
		t.Logf("FACT %s (only path, ctrl_loss_tmo %d): 8 s later: verifier %d -> %d blocks, error %v, controller %s %q (%v)",
			name, cc.Timeouts.CtrlLoss, n0, n1, v.error(), c.Name, cc.State, err)
		if n1-n0 > 1 || v.error() != nil {
			t.Errorf("%s: I/O did not wait (%d -> %d, %v)", name, n0, n1, v.error())
		}
	}
	resumes := func(name string, v *verifier) {
		t.Helper()
		n := v.progress()
		at := step(stepOf(name))
		nvmetest.Eventually(t, 30*time.Second, name+": V2 I/O resumes", func() error {
			if v.progress() <= n+2 {
				return fmt.Errorf("verifier at %d", v.progress())
			}
			return nil
		})
		t.Logf("FACT %s: I/O resumed %.2f s after the apply, no error", name, time.Since(at).Seconds())
	}
	// fails checks that V2's I/O fails after step name and says when.
	fails := func(name string, c nvmf.Controller, v *verifier) {
		t.Helper()
		at := step(stepOf(name))
		select {
		case <-v.done:
			_, err := os.Stat("/sys/class/nvme/" + c.Name)
			t.Logf("FACT %s: I/O failed %.1f s after the apply: %v (controller %s gone: %v)", name, time.Since(at).Seconds(), v.error(), c.Name, err != nil)
			if v.error() == nil {
				t.Errorf("%s: verifier ended without error", name)
			}
		case <-time.After(40 * time.Second):
			t.Errorf("%s: no I/O error within 40 s", name)
		}
		v.stop()
	}
	c2, v2 := connect2()
	stalls("v2-inaccessible", c2, v2)
	resumes("v2-optimized", v2)
	stalls("v2-port-removed", c2, v2)
	resumes("v2-port-back", v2)
	// A finite ctrl_loss_tmo: the controller is deleted when it runs out.
	if err := h.SetTimeouts(c2.Name, nvmf.Timeouts{KeepAlive: 5, ReconnectDelay: 2, CtrlLoss: 6, FastIOFail: nvmf.Forever}); err != nil {
		t.Fatal(err)
	}
	fails("v2-port-removed-finite", c2, v2)
	step(stepOf("v2-port-back-2"))
	c2, v2 = connect2()
	// The target answers but no longer exports V2 on the port.
	fails("v2-unlinked", c2, v2)
	g.Signal(t, "finished")
}

// logHeadAttrs logs the multipath head's sysfs attributes that bear on
// no-path behaviour (which exist depends on the kernel).
func logHeadAttrs(t *testing.T, head string) {
	dir := filepath.Join("/sys/block", filepath.Base(head))
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	t.Logf("head %s sysfs: %s", head, strings.Join(names, " "))
	for _, n := range []string{"queue_if_no_path", "delayed_removal_secs"} {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err == nil {
			t.Logf("head %s: %s = %s", head, n, strings.TrimSpace(string(b)))
		} else {
			t.Logf("head %s: no %s on this kernel", head, n)
		}
	}
	m, _ := os.ReadFile("/sys/module/nvme_core/parameters/multipath")
	t.Logf("nvme_core.multipath = %s", strings.TrimSpace(string(m)))
}

// pathWritesOr0 is pathWrites for a path that may be gone (0 then).
func pathWritesOr0(c nvmf.Controller) int64 {
	b, err := os.ReadFile(filepath.Join("/sys/class/nvme", c.Name, c.Paths[0].Name, "stat"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 5 {
		return 0
	}
	n, _ := strconv.ParseInt(f[4], 10, 64)
	return n
}

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
