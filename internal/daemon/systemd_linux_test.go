//go:build linux

package daemon_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/ublk"
)

// TestIntegrationSystemdEngine runs the packaged units on a 6.12 guest
// booted with Debian's systemd as PID 1 and dbus, 7 disks: fabraidd.service
// (Type=notify) with the default engine_mode (auto) starts the volume's
// engine as fabraid-engine@vol\x2d0.service over D-Bus. With a verifier
// writing and reading through the multipath head: systemctl kill -s KILL
// of the engine (systemd restarts it, ublk user recovery, no I/O error),
// systemctl restart fabraidd (the engine unit keeps its PID, the volume its
// identity), fail + replace (the engine records the new member list in its
// spec, and a second kill assembles from it), a crash loop until the unit
// is failed (fabraidd resets and restarts it), then delete stops the unit
// and removes the spec.
func TestIntegrationSystemdEngine(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{systemdNode(t)}, Timeout: 280 * time.Second}, systemdGuest)
}

// TestIntegrationSystemdProcessMode runs fabraidd.service with
// engine_mode = process: the engine is a child in fabraidd's cgroup, and
// KillMode=process keeps it serving (same PID, no verifier error) through
// systemctl restart fabraidd; the new daemon adopts it.
func TestIntegrationSystemdProcessMode(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{systemdNode(t)}, Timeout: 200 * time.Second}, processModeGuest)
}

// systemdNode is oneNode booting systemd, with the packaged units installed.
func systemdNode(t *testing.T) vmtest.GuestConfig {
	g := oneNode(t, "/usr/sbin/fabraidd")
	g.Systemd = true
	for _, u := range []string{"fabraidd.service", "fabraid-engine@.service"} {
		p, err := filepath.Abs(filepath.Join("..", "..", "packaging", "systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		g.Files["/usr/lib/systemd/system/"+u] = p
	}
	return g
}

// startUnitDaemon writes the configuration (plus extra lines), claims the
// disks and starts fabraidd.service; it returns the daemon's MainPID.
func startUnitDaemon(t *testing.T, g *vmtest.Env, extra string) int {
	os.MkdirAll("/etc/fabraid", 0o755)
	conf := "node_name = a\nmetrics_address = 127.0.0.1:9436\n" + extra
	if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := systemctl(t, "daemon-reload"); err != nil {
		t.Fatal(err)
	}
	mustRun(t, append([]string{"drive", "claim"}, g.Disks...)...)
	t0 := time.Now()
	if _, err := systemctl(t, "start", "fabraidd"); err != nil {
		t.Fatal(err)
	}
	t.Logf("systemctl start fabraidd: %v", time.Since(t0))
	if _, err := exec.Command("/usr/bin/fabraid", "volume", "list").Output(); err != nil {
		t.Fatalf("API not answering right after systemctl start (Type=notify): %v", err)
	}
	pid, _ := strconv.Atoi(unitProp(t, "fabraidd.service", "MainPID"))
	return pid
}

func processModeGuest(t *testing.T, g *vmtest.Env) {
	daemonPID := startUnitDaemon(t, g, "engine_mode = process\n")
	var in api.Volume
	if err := json.Unmarshal([]byte(mustRun(t, "volume", "create", "vol0", "--data", "4", "--parity", "2", "--json")), &in); err != nil {
		t.Fatal(err)
	}
	if p := ppid(t, in.EnginePID); p != daemonPID {
		t.Errorf("engine %d has parent %d, want fabraidd %d", in.EnginePID, p, daemonPID)
	}
	if st, _ := systemctl(t, "is-active", volmgr.EngineUnit("vol0")); st == "active" {
		t.Error("engine unit active in process mode")
	}
	v := startVerifier(t, in.Device)
	time.Sleep(time.Second)
	if _, err := systemctl(t, "restart", "fabraidd"); err != nil {
		t.Fatal(err)
	}
	re := show(t)
	if re.EnginePID != in.EnginePID || re.Ublk != in.Ublk || re.Device != in.Device {
		t.Errorf("after systemctl restart fabraidd: %+v, want engine %d on %s", re, in.EnginePID, in.Ublk)
	}
	time.Sleep(time.Second)
	v.halt(t)
	v.f.Close()
	mustRun(t, "volume", "delete", "vol0", "--yes")
	if ids, err := ublk.List(); err != nil || len(ids) != 0 {
		t.Errorf("ublk devices after delete: %v %v", ids, err)
	}
	systemctl(t, "stop", "fabraidd")
}

// systemctl runs systemctl and returns its trimmed output.
func systemctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	t.Logf("systemctl %s: %v %s", strings.Join(args, " "), err, s)
	return s, err
}

// unitProp is one property of a unit (systemctl show -p NAME --value).
func unitProp(t *testing.T, unit, name string) string {
	t.Helper()
	out, err := exec.Command("systemctl", "show", "-p", name, "--value", unit).Output()
	if err != nil {
		t.Fatalf("systemctl show %s %s: %v", unit, name, err)
	}
	return strings.TrimSpace(string(out))
}

// ppid is the parent of process pid.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	n, _ := strconv.Atoi(f[1])
	return n
}

func showVol(t *testing.T, name string) api.Volume {
	t.Helper()
	out, err := exec.Command("/usr/bin/fabraid", "volume", "show", name, "--json").Output()
	if err != nil {
		t.Fatalf("volume show %s: %v", name, err)
	}
	var in api.Volume
	if err := json.Unmarshal(out, &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// waitSettled waits until the volume runs no background task (the resync
// a restarted engine runs after an unclean stop, a rebuild, a scrub) and
// returns its state then.
func waitSettled(t *testing.T, name string) api.Volume {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		in := showVol(t, name)
		if in.Progress == nil && in.Task == "" && in.State != "stopped" {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume %s still busy after 90s: %+v", name, in)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killEngine kills the engine unit's main process with SIGKILL through
// systemd and waits until a new engine serves the volume. It logs the time
// until systemd had a new main process, until the new engine served the
// volume, and the slowest verifier I/O meanwhile.
func killEngine(t *testing.T, v *verifier, vol, unit string, old api.Volume) api.Volume {
	t.Helper()
	v.mu.Lock()
	v.maxLat = 0
	v.mu.Unlock()
	t0 := time.Now()
	if _, err := systemctl(t, "kill", "-s", "KILL", unit); err != nil {
		t.Fatal(err)
	}
	var respawn time.Duration
	for {
		if mp := unitProp(t, unit, "MainPID"); respawn == 0 && mp != "0" && mp != strconv.Itoa(old.EnginePID) {
			respawn = time.Since(t0)
		}
		in := showVol(t, vol) // "stopped" while no engine answers
		if in.EnginePID != 0 && in.EnginePID != old.EnginePID {
			took := time.Since(t0)
			time.Sleep(time.Second) // I/O queued during the pause completes
			v.mu.Lock()
			lat := v.maxLat
			v.mu.Unlock()
			t.Logf("systemd engine restart: engine %d killed; new main process after %v; engine %d serving %s after %v; slowest verifier I/O meanwhile %v",
				old.EnginePID, respawn, in.EnginePID, in.Ublk, took, lat)
			return in
		}
		if time.Since(t0) > time.Minute {
			t.Fatalf("no new engine 60s after systemctl kill: %+v", in)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// journal logs the journal of fabraidd and the volume's engine unit and
// checks that the entries carry the attributes as fields (VOLUME=) and are
// attributed to their units.
func journal(t *testing.T, vol string) {
	out, err := exec.Command("journalctl", "--no-pager", "-o", "short-monotonic", "-u", "fabraidd", "-u", volmgr.EngineUnit(vol)).CombinedOutput()
	t.Logf("journalctl -u fabraidd -u %s: %v\n%s", volmgr.EngineUnit(vol), err, out)
	for _, c := range []struct{ match, want string }{
		{"VOLUME=" + vol, "engine serving"},
		{"_SYSTEMD_UNIT=" + volmgr.EngineUnit(vol), "engine serving"},
		{"_SYSTEMD_UNIT=fabraidd.service", "resetting and starting it again"},
	} {
		out, err := exec.Command("journalctl", "--no-pager", "-o", "cat", c.match).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("journalctl %s: no entry %q (%v)", c.match, c.want, err)
		}
	}
}

// unexplainedReconcileErrors are fabraidd's logged reconcile errors but
// for the one the crash loop can cause: its kill can land in the start
// job fabraidd runs right after its reset-failed, and that start fails
// with result "signal". Any other reconcile error is a bug; none at all
// (the metric counted errors the journal lacks) is one too.
func unexplainedReconcileErrors(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("journalctl", "--no-pager", "-o", "cat", "_SYSTEMD_UNIT=fabraidd.service").CombinedOutput()
	if err != nil {
		t.Fatalf("journalctl: %v %s", err, out)
	}
	var bad []string
	explained := 0
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "reconcile err=") {
			continue
		}
		if strings.Contains(l, "job failed (result signal") {
			explained++
			continue
		}
		bad = append(bad, l)
	}
	if explained == 0 && len(bad) == 0 {
		bad = append(bad, "no reconcile error in fabraidd's journal")
	}
	return bad
}

func systemdGuest(t *testing.T, g *vmtest.Env) {
	const vol = "vol-0" // '-' is escaped in the unit name
	unit := volmgr.EngineUnit(vol)
	spec := volmgr.SpecPath("/run/fabraid", vol)
	daemonPID := startUnitDaemon(t, g, "") // engine_mode not set: auto must choose systemd here

	t0 := time.Now()
	var in api.Volume
	if err := json.Unmarshal([]byte(mustRun(t, "volume", "create", vol, "--data", "4", "--parity", "2", "--drives",
		strings.Join(g.Disks[:6], ","), "--json")), &in); err != nil {
		t.Fatal(err)
	}
	t.Logf("volume create: %v", time.Since(t0))
	if !strings.HasPrefix(in.Device, "/dev/nvme") || in.State != "optimal" || in.EnginePID == 0 {
		t.Fatalf("created: %+v", in)
	}
	if st, _ := systemctl(t, "is-active", unit); st != "active" {
		t.Fatalf("%s is %s", unit, st)
	}
	if mp := unitProp(t, unit, "MainPID"); mp != strconv.Itoa(in.EnginePID) {
		t.Errorf("%s MainPID %s, engine pid %d", unit, mp, in.EnginePID)
	}
	if p := ppid(t, in.EnginePID); p == daemonPID || p != 1 {
		t.Errorf("engine %d has parent %d (fabraidd %d), want systemd (1)", in.EnginePID, p, daemonPID)
	}
	s, err := volmgr.ReadSpec(spec)
	if err != nil || "/dev/ublkb"+strconv.Itoa(s.UblkID) != in.Ublk || s.UUID != in.UUID || len(s.Members) != 6 {
		t.Fatalf("spec %s: %+v %v (volume %s on %s)", spec, s, err, in.UUID, in.Ublk)
	}
	if st, err := os.Stat(spec); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("spec mode: %v", err)
	}

	v := startVerifier(t, in.Device)
	f := v.f
	time.Sleep(time.Second)

	// The engine crashes: systemd restarts it (Restart=on-failure), the
	// new engine re-attaches to the same ublk device.
	after := killEngine(t, v, vol, unit, in)
	v.check(t)
	if after.Ublk != in.Ublk || after.Device != in.Device {
		t.Errorf("after engine restart: ublk %s device %s, want %s %s", after.Ublk, after.Device, in.Ublk, in.Device)
	}
	if n := unitProp(t, unit, "NRestarts"); n != "1" {
		t.Errorf("%s NRestarts = %s, want 1", unit, n)
	}
	if mp := unitProp(t, unit, "MainPID"); mp != strconv.Itoa(after.EnginePID) {
		t.Errorf("after restart: MainPID %s, engine %d", mp, after.EnginePID)
	}

	// The daemon restarts; the engine unit is not touched.
	t0 = time.Now()
	if _, err := systemctl(t, "restart", "fabraidd"); err != nil {
		t.Fatal(err)
	}
	t.Logf("systemctl restart fabraidd: %v", time.Since(t0))
	if nd, _ := strconv.Atoi(unitProp(t, "fabraidd.service", "MainPID")); nd == daemonPID || nd == 0 {
		t.Errorf("fabraidd MainPID %d after restart (was %d)", nd, daemonPID)
	}
	re := showVol(t, vol)
	if mp := unitProp(t, unit, "MainPID"); mp != strconv.Itoa(after.EnginePID) || re.EnginePID != after.EnginePID {
		t.Errorf("after daemon restart: unit MainPID %s, engine %d, want %d", mp, re.EnginePID, after.EnginePID)
	}
	if re.UUID != in.UUID || re.Device != in.Device || re.NQN != in.NQN || re.Ublk != in.Ublk {
		t.Errorf("after daemon restart: %+v, want device %s ublk %s", re, in.Device, in.Ublk)
	}
	time.Sleep(time.Second)
	v.check(t)

	// Replace a member: the engine records the new member list, so the
	// next restart by systemd assembles from it.
	// After the kill the new engine resyncs in the background; a member
	// lost before that ends is the write hole (docs/engine.md), not what
	// this step tests.
	waitSettled(t, vol)
	mustRun(t, "volume", "fail", vol, "2")
	mustRun(t, "volume", "replace", vol, "2", g.Disks[6], "--wait")
	s, err = volmgr.ReadSpec(spec)
	if err != nil || !slices.Contains(s.Members, g.Disks[6]) || slices.Contains(s.Members, g.Disks[2]) || len(s.Members) != 6 {
		t.Errorf("spec after replace: %+v %v (want %s instead of %s)", s, err, g.Disks[6], g.Disks[2])
	}
	killed := killEngine(t, v, vol, unit, re)
	after2 := waitSettled(t, vol)
	if after2.EnginePID != killed.EnginePID || after2.State != "optimal" || after2.Ublk != in.Ublk || !slices.ContainsFunc(after2.Members, func(m api.Member) bool {
		return m.Device == g.Disks[6] && m.Role == "active"
	}) {
		t.Errorf("after restart from the updated spec: %+v", after2)
	}

	v.halt(t)
	t.Logf("verifier: %d ops", v.ops)
	for blk := int64(0); blk < vsize/vblock; blk++ {
		if err := v.op(blk, 0, false); err != nil {
			t.Fatal(err)
		}
	}

	// A crash loop: past its start limit systemd leaves the unit failed;
	// fabraidd's next reconcile resets it and starts it again, and the
	// engine recovers the same ublk device. The limit is lowered to 2
	// starts in 10 min here (a runtime drop-in): the shipped 5 in 60 s
	// needs kills faster than this guest resyncs.
	dropin := "/run/systemd/system/" + unit + ".d"
	if err := os.MkdirAll(dropin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropin+"/limit.conf", []byte("[Unit]\nStartLimitIntervalSec=600\nStartLimitBurst=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := systemctl(t, "daemon-reload"); err != nil {
		t.Fatal(err)
	}
	cur := after2.EnginePID
	for i := 0; unitProp(t, unit, "ActiveState") != "failed"; i++ {
		if i == 8 {
			t.Fatalf("%s not failed after %d kills", unit, i)
		}
		systemctl(t, "kill", "-s", "KILL", unit)
		for j := 0; ; j++ {
			if st := unitProp(t, unit, "ActiveState"); st == "failed" {
				break
			}
			if in := showVol(t, vol); in.EnginePID != 0 && in.EnginePID != cur {
				cur = in.EnginePID
				break
			}
			if j > 600 {
				t.Fatalf("no new engine and no failed unit 60s after kill %d", i+1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("%s failed: %s", unit, unitProp(t, unit, "Result"))
	t0 = time.Now()
	for i := 0; ; i++ {
		if in := showVol(t, vol); in.EnginePID != 0 && in.EnginePID != cur {
			t.Logf("fabraidd restarted the failed unit after %v: engine %d on %s", time.Since(t0), in.EnginePID, in.Ublk)
			if in.Ublk != after2.Ublk || in.Device != after2.Device || unitProp(t, unit, "ActiveState") != "active" {
				t.Errorf("after reset-failed: %+v, unit %s", in, unitProp(t, unit, "ActiveState"))
			}
			break
		}
		if i > 600 { // its next reconcile (10 s) plus the restart with resync
			t.Fatal("fabraidd did not restart the failed engine unit within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for blk := int64(0); blk < vsize/vblock; blk++ {
		if err := v.op(blk, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	// Delete stops the unit and removes the spec.
	mustRun(t, "volume", "delete", vol, "--yes")
	if st, _ := systemctl(t, "is-active", unit); st != "inactive" {
		t.Errorf("%s after delete: %s, want inactive", unit, st)
	}
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Errorf("spec after delete: %v", err)
	}
	if ids, err := ublk.List(); err != nil || len(ids) != 0 {
		t.Errorf("ublk devices after delete: %v %v", ids, err)
	}
	time.Sleep(time.Second)
	if out, _ := run(t, "volume", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("volumes after delete: %s", out)
	}
	if line, _ := metric(t, "fabraid_reconcile_errors_total"); line != "fabraid_reconcile_errors_total 0" {
		if bad := unexplainedReconcileErrors(t); len(bad) > 0 {
			t.Errorf("reconcile errors: %q: %q", line, bad)
		}
	}
	if _, err := systemctl(t, "stop", "fabraidd"); err != nil {
		t.Error(err)
	}
	journal(t, vol)
}
