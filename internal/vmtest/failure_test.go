package vmtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// isolatedTemp points the harness's temporary files at a fresh directory
// and returns a check that it is empty again and that no qemu process
// started from it is alive.
func isolatedTemp(t *testing.T) func() {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	return func() {
		t.Helper()
		left, _ := os.ReadDir(dir)
		for _, e := range left {
			t.Errorf("temporary file left behind: %s", filepath.Join(dir, e.Name()))
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), "qemu-system") && strings.Contains(string(b), dir) {
				t.Errorf("qemu still running: %s", strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
	}
}

func requireVM(t *testing.T) {
	t.Helper()
	if InGuest() {
		t.Skip("host-side test")
	}
	if !Enabled() {
		t.Skip("VM test: set FABRAID_VMTEST=1 (make vmtest) to boot real kernels in qemu")
	}
}

func bootCommand(t *testing.T, timeout time.Duration, modules []string, cmd ...string) (GuestOutcome, error) {
	t.Helper()
	outs, err := Boot(context.Background(), BootConfig{
		Guests:  []GuestConfig{{Name: "broken", Modules: modules}},
		Timeout: timeout,
		Command: cmd,
		Log:     func(g, l string) { t.Logf("[%s] %s", g, l) },
	})
	if err != nil {
		return GuestOutcome{}, err
	}
	return outs[0], nil
}

// A module the kernel does not have fails before any boot, naming the
// module and the kernel, and leaves nothing behind.
func TestIntegrationBrokenGuestMissingModule(t *testing.T) {
	requireVM(t)
	check := isolatedTemp(t)
	_, err := bootCommand(t, time.Minute, []string{"nvmet", "no_such_module"}, "/bin/true")
	if err == nil || !strings.Contains(err.Error(), "module no_such_module not found in kernel 6.12") {
		t.Fatalf("error %v, want one naming no_such_module and the kernel", err)
	}
	check()
}

// A guest that never finishes is killed at its timeout; the outcome says
// so; no qemu and no temporary file survive.
func TestIntegrationBrokenGuestTimeout(t *testing.T) {
	requireVM(t)
	check := isolatedTemp(t)
	o, err := bootCommand(t, 25*time.Second, nil, "/bin/sleep", "3600")
	if err != nil {
		t.Fatal(err)
	}
	if o.Passed || !strings.Contains(o.Reason, "timed out after 25s") || !strings.Contains(o.Reason, "qemu killed") {
		t.Errorf("outcome %+v, want a timeout failure", o)
	}
	check()
}

// A kernel panic ends the guest at once (panic=-1, -no-reboot): no verdict
// is a failure, never a pass, and it says why.
func TestIntegrationBrokenGuestPanic(t *testing.T) {
	requireVM(t)
	check := isolatedTemp(t)
	o, err := bootCommand(t, time.Minute, nil, "/bin/sh", "-c", "echo c > /proc/sysrq-trigger; sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	if o.Passed || !strings.Contains(o.Reason, "without a verdict") {
		t.Errorf("outcome %+v, want failure without a verdict", o)
	}
	// The crash came after /init started: it is the test's, never retried.
	for _, l := range o.Console {
		if strings.Contains(l, "second boot") {
			t.Errorf("a crash after /init started was booted again")
		}
	}
	check()
}

// A command that fails makes the guest fail with its exit status.
func TestIntegrationBrokenGuestCommandFails(t *testing.T) {
	requireVM(t)
	o, err := bootCommand(t, time.Minute, nil, "/bin/sh", "-c", "exit 7")
	if err != nil {
		t.Fatal(err)
	}
	if o.Passed || !strings.Contains(o.Reason, "command exited 7") {
		t.Errorf("outcome %+v, want 'command exited 7'", o)
	}
}

// TestHelperGuestOutcome is a payload for TestIntegrationGuestOutcomes: in
// a guest it skips, fails or passes as FABRAID_HELPER says.
func TestHelperGuestOutcome(t *testing.T) {
	if !InGuest() {
		t.Skip("payload of TestIntegrationGuestOutcomes; runs only inside its guests")
	}
	Run(t, Options{}, func(t *testing.T, g *Env) {
		switch os.Getenv("FABRAID_HELPER") {
		case "skip":
			t.Skip("deliberate skip: kernel lacks the thing")
		case "fail":
			t.Error("deliberate failure")
		}
	})
}

// Skips and failures inside a guest's test function reach the host as
// such, with the guest's reason; a passing function passes.
func TestIntegrationGuestOutcomes(t *testing.T) {
	requireVM(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"skip", "fail", "pass"} {
		outs, err := Boot(context.Background(), BootConfig{
			Guests:  []GuestConfig{{Name: "g" + mode}},
			Timeout: time.Minute,
			Binary:  exe,
			Args:    []string{"-test.run", "^TestHelperGuestOutcome$", "-test.v"},
			Env:     map[string]string{"FABRAID_HELPER": mode},
			Log:     func(g, l string) { t.Logf("[%s] %s", g, l) },
		})
		if err != nil {
			t.Fatal(err)
		}
		o := outs[0]
		switch mode {
		case "skip":
			if !o.Skipped || o.Passed || !strings.Contains(o.Reason, "deliberate skip: kernel lacks the thing") {
				t.Errorf("skip: outcome %+v", o)
			}
		case "fail":
			if o.Passed || o.Skipped || !strings.Contains(o.Reason, "test binary exited") {
				t.Errorf("fail: outcome %+v", o)
			}
		case "pass":
			if !o.Passed || o.Skipped {
				t.Errorf("pass: outcome %+v", o)
			}
		}
	}
}

// Three guests on one relayed network reach each other (the hub forwards
// broadcast ARP and learns unicast), and Signal/Wait orders them.
func TestIntegrationThreeGuestNetwork(t *testing.T) {
	Run(t, Options{Guests: []GuestConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}}}, func(t *testing.T, g *Env) {
		// Guests boot at different speeds: /init configured eth0 before
		// this runs, so "up" means reachable.
		g.Signal(t, "up")
		for _, peer := range g.Guests() {
			g.Wait(t, peer, "up")
		}
		for _, peer := range g.Guests() {
			if peer == g.Name {
				continue
			}
			if out, err := busybox("ping", "-c", "2", "-W", "5", g.Addr(peer)); err != nil {
				t.Errorf("%s cannot reach %s at %s: %v\n%s", g.Name, peer, g.Addr(peer), err, out)
			}
		}
		g.Signal(t, "pinged")
		for _, peer := range g.Guests() {
			g.Wait(t, peer, "pinged")
		}
	})
}
