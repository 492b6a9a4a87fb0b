package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// InGuest reports whether this process runs inside a vmtest guest.
func InGuest() bool { return os.Getenv("FABRAID_VMTEST_GUEST") != "" }

// Enabled reports whether VM tests were asked for (FABRAID_VMTEST=1).
func Enabled() bool { return os.Getenv("FABRAID_VMTEST") == "1" }

// Run boots the guests of opts and runs fn inside each of them; see the
// package documentation. On the host it returns when every guest ended;
// the test fails if any guest failed and skips if a guest skipped.
func Run(t *testing.T, opts Options, fn func(t *testing.T, g *Env)) {
	t.Helper()
	if InGuest() {
		runGuest(t, fn)
		return
	}
	if !Enabled() {
		t.Skip("VM test: set FABRAID_VMTEST=1 (make vmtest) to boot real kernels in qemu")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("vmtest: %v", err)
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	if dl, ok := t.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl) - 5*time.Second
	}
	cfg := BootConfig{
		Guests:  opts.Guests,
		Timeout: timeout,
		Binary:  exe,
		Args:    []string{"-test.run", runPattern(t.Name()), "-test.v", "-test.timeout", timeout.String()},
		Log: func(guest, line string) {
			t.Logf("[%s] %s", guest, line)
		},
	}
	start := time.Now()
	outcomes, err := Boot(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var failed, skipped []string
	for _, o := range outcomes {
		switch {
		case o.Skipped:
			skipped = append(skipped, fmt.Sprintf("guest %s skipped: %s", o.Name, o.Reason))
		case !o.Passed:
			failed = append(failed, o.Reason)
		}
	}
	t.Logf("vmtest: %d guest(s) done in %v", len(outcomes), time.Since(start).Round(time.Millisecond))
	if len(failed) > 0 {
		t.Fatalf("vmtest: %s", strings.Join(failed, "\n"))
	}
	if len(skipped) > 0 {
		t.Skip(strings.Join(skipped, "\n"))
	}
}

// runPattern turns a test name into a -test.run pattern that selects exactly
// it: TestX/sub -> ^TestX$/^sub$.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// runGuest runs fn inside the guest and records its status in the shared
// directory, where /init and peers (Wait) read it.
func runGuest(t *testing.T, fn func(t *testing.T, g *Env)) {
	env := guestEnv()
	status := "fail"
	defer func() {
		switch {
		case t.Failed():
			status = "fail"
		case t.Skipped():
			status = "skip"
		}
		os.WriteFile(filepath.Join(env.Shared, env.Name+".status"), []byte(status+"\n"), 0o644)
	}()
	fn(t, env)
	status = "pass"
}

// guestEnv reads the guest's identity from the environment /init set.
func guestEnv() *Env {
	env := &Env{
		Name:   os.Getenv("FABRAID_VMTEST_GUEST"),
		Kernel: os.Getenv("FABRAID_VMTEST_KERNEL"),
		Shared: os.Getenv("FABRAID_VMTEST_SHARED"),
		addrs:  map[string]string{},
	}
	env.Index, _ = strconv.Atoi(os.Getenv("FABRAID_VMTEST_INDEX"))
	env.Disks = strings.Fields(os.Getenv("FABRAID_VMTEST_DISKS"))
	env.serials = strings.Fields(os.Getenv("FABRAID_VMTEST_SERIALS"))
	env.BootNum = bootNumber()
	for _, kv := range strings.Split(os.Getenv("FABRAID_VMTEST_ADDRS"), ",") {
		if n, a, ok := strings.Cut(kv, "="); ok {
			env.addrs[n] = a
			env.guests = append(env.guests, n)
		}
	}
	return env
}

// Addr returns the IPv4 address of the named guest on the guests' network.
func (e *Env) Addr(guest string) string {
	a, ok := e.addrs[guest]
	if !ok {
		panic(fmt.Sprintf("vmtest: no guest named %q", guest))
	}
	return a
}

// Guests returns the names of all guests of this run, in order.
func (e *Env) Guests() []string { return append([]string(nil), e.guests...) }

// Signal announces event to the other guests (see Wait). Events are per
// boot: when the guest is killed (Env.Kill) or booted again its events are
// removed, so a Wait after Env.Boot sees only the new boot's.
func (e *Env) Signal(t testing.TB, event string) {
	t.Helper()
	p := filepath.Join(e.Shared, fmt.Sprintf("%s.event.%s", e.Name, event))
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatalf("vmtest: signal %s: %v", event, err)
	}
}

// Wait blocks until guest signalled event. It fails the test when that
// guest ended without signalling it; while the guest is powered off
// (Env.Kill) it keeps waiting for a boot that signals it. It lists the shared directory instead
// of stat'ing the event file: a 9p client may keep a negative dentry for a
// file another guest created meanwhile, a listing always asks the host.
func (e *Env) Wait(t testing.TB, guest, event string) {
	t.Helper()
	eventName := fmt.Sprintf("%s.event.%s", guest, event)
	statusName := guest + ".status"
	for {
		names, err := listDir(e.Shared)
		if err != nil {
			t.Fatalf("vmtest: wait for %s: %v", eventName, err)
		}
		if names[eventName] {
			return
		}
		if names[statusName] {
			// The guest ended; a signal it gave just before is in this
			// listing already, so this is final.
			b, _ := os.ReadFile(filepath.Join(e.Shared, statusName))
			t.Fatalf("vmtest: guest %s ended (%s) without signalling %q", guest, strings.TrimSpace(string(b)), event)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func listDir(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names, nil
}

// BuildBinary builds a static binary of a package of this module (for
// GuestConfig.Files) into the test's temporary directory and returns its
// path. On the guest side it returns "" (the binary is already in the
// initramfs) and does not build.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	if InGuest() || !Enabled() {
		return ""
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("vmtest: go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
