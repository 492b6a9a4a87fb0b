package vmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// helloUnit is a file-based service the systemd self-test starts.
const helloUnit = `[Unit]
Description=vmtest hello

[Service]
Type=oneshot
ExecStart=/bin/echo hello-from-a-unit-file
`

// TestIntegrationSystemd boots a 6.12 guest with systemd as PID 1 and
// checks from inside what systemd-facing tests rely on: PID 1 is systemd,
// the boot finished, the system bus answers with systemd on it, journald
// stores structured fields from both systemd-cat and its native protocol,
// and services (from a unit file and transient) start and log.
func TestIntegrationSystemd(t *testing.T) {
	unit := filepath.Join(t.TempDir(), "vmtest-hello.service")
	if err := os.WriteFile(unit, []byte(helloUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	Run(t, Options{Guests: []GuestConfig{{
		Name: "a", Kernel: Kernel612, Systemd: true,
		Files: map[string]string{"/etc/systemd/system/vmtest-hello.service": unit},
	}}}, func(t *testing.T, g *Env) {
		logUptime(t, "payload started")
		if comm, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(comm)) != "systemd" {
			t.Fatalf("/proc/1/comm = %q, want systemd", comm)
		}
		checkSystemRunning(t)
		logUptime(t, "boot finished")
		checkLayout(t)
		checkBus(t)
		checkJournalFields(t)
		checkServices(t)
		if st, err := os.Stat("/etc/systemd/system/vmtest-hello.service"); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("unit file from GuestConfig.Files: %v, mode %v (want 0644)", err, st.Mode())
		}
		if out, err := exec.Command("systemd-analyze", "time").CombinedOutput(); err == nil {
			t.Logf("systemd-analyze time: %s", strings.TrimSpace(string(out)))
		}
	})
}

// checkLayout checks the usr-merged layout: the loader at /lib64, and
// util-linux's mount and systemd's tools not replaced by busybox links.
func checkLayout(t *testing.T) {
	for _, p := range []string{"/bin/mount", "/usr/bin/umount", "/bin/systemctl", "/lib/systemd/systemd"} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
		} else if !st.Mode().IsRegular() {
			target, _ := os.Readlink(p)
			t.Errorf("%s is a %v (-> %q), want the packaged binary", p, st.Mode().Type(), target)
		}
	}
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err != nil {
		t.Errorf("loader: %v", err)
	}
}

// logUptime logs the guest's uptime (seconds since the kernel started).
func logUptime(t *testing.T, what string) {
	b, _ := os.ReadFile("/proc/uptime")
	up, _, _ := strings.Cut(string(b), " ")
	t.Logf("%s at guest uptime %ss", what, up)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// checkSystemRunning waits for the boot to finish: running, or degraded
// with the failed units listed.
func checkSystemRunning(t *testing.T) {
	out, _ := exec.Command("systemctl", "is-system-running", "--wait").CombinedOutput()
	state := strings.TrimSpace(string(out))
	lines := strings.Split(state, "\n")
	switch last := lines[len(lines)-1]; last {
	case "running":
	case "degraded":
		failed, _ := exec.Command("systemctl", "--failed", "--no-legend", "--no-pager").CombinedOutput()
		t.Logf("system degraded; failed units:\n%s", failed)
	default:
		jobs, _ := exec.Command("systemctl", "list-jobs", "--no-pager").CombinedOutput()
		t.Fatalf("systemctl is-system-running: %q\n%s", state, jobs)
	}
}

// checkBus asks dbus-daemon for its names: systemd must be on the bus.
func checkBus(t *testing.T) {
	var out string
	for deadline := time.Now().Add(20 * time.Second); ; {
		b, err := exec.Command("busctl", "--system", "--no-pager", "--no-legend", "list").CombinedOutput()
		out = string(b)
		if err == nil && strings.Contains(out, "org.freedesktop.systemd1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("org.freedesktop.systemd1 not on the system bus: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	run(t, "dbus-send", "--system", "--print-reply", "--dest=org.freedesktop.DBus",
		"/org/freedesktop/DBus", "org.freedesktop.DBus.GetNameOwner", "string:org.freedesktop.systemd1")
}

// checkJournalFields sends one message with systemd-cat and one over
// journald's native socket with a custom field, and reads both back.
func checkJournalFields(t *testing.T) {
	nonce := fmt.Sprintf("%d", time.Now().UnixNano())
	cat := exec.Command("systemd-cat", "-t", "vmtest", "-p", "warning")
	cat.Stdin = strings.NewReader("systemd-cat says " + nonce + "\n")
	if out, err := cat.CombinedOutput(); err != nil {
		t.Fatalf("systemd-cat: %v\n%s", err, out)
	}
	conn, err := net.Dial("unixgram", "/run/systemd/journal/socket")
	if err != nil {
		t.Fatalf("journald native socket: %v", err)
	}
	defer conn.Close()
	msg := "MESSAGE=native says " + nonce + "\nPRIORITY=6\nSYSLOG_IDENTIFIER=vmtest\nVMTEST_NONCE=" + nonce + "\n"
	if _, err := conn.Write([]byte(msg)); err != nil {
		t.Fatalf("journald native socket: %v", err)
	}
	e := waitJournal(t, "SYSLOG_IDENTIFIER=vmtest", "systemd-cat says "+nonce)
	if e["PRIORITY"] != "4" {
		t.Errorf("systemd-cat entry PRIORITY %v, want 4: %v", e["PRIORITY"], e)
	}
	e = waitJournal(t, "VMTEST_NONCE="+nonce, "native says "+nonce)
	if e["SYSLOG_IDENTIFIER"] != "vmtest" {
		t.Errorf("native entry: %v", e)
	}
}

// waitJournal polls journalctl -o json with a match until an entry whose
// MESSAGE is message appears, and returns it.
func waitJournal(t *testing.T, match, message string) map[string]any {
	t.Helper()
	var out []byte
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var err error
		out, err = exec.Command("journalctl", "--no-pager", "-o", "json", match).Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) == nil && e["MESSAGE"] == message {
				return e
			}
		}
	}
	t.Fatalf("journal has no %q for %s:\n%s", message, match, out)
	return nil
}

// checkServices starts the unit file from GuestConfig.Files and a
// transient service, and finds their output in the journal.
func checkServices(t *testing.T) {
	run(t, "systemctl", "start", "vmtest-hello.service")
	waitJournal(t, "_SYSTEMD_UNIT=vmtest-hello.service", "hello-from-a-unit-file")
	run(t, "systemd-run", "--unit=vmtest-transient", "--wait", "--quiet", "/bin/echo", "hello-from-systemd-run")
	waitJournal(t, "_SYSTEMD_UNIT=vmtest-transient.service", "hello-from-systemd-run")
	// The sandboxing packaged units use needs mount namespaces on the
	// initramfs root.
	run(t, "systemd-run", "--unit=vmtest-sandboxed", "--wait", "--quiet",
		"-p", "PrivateTmp=yes", "-p", "ProtectSystem=strict", "-p", "ProtectHome=yes",
		"-p", "PrivateNetwork=yes", "-p", "NoNewPrivileges=yes", "-p", "MemoryDenyWriteExecute=yes",
		"/bin/sh", "-c", "touch /usr/x 2>/dev/null && echo writable || echo sandboxed-ok")
	waitJournal(t, "_SYSTEMD_UNIT=vmtest-sandboxed.service", "sandboxed-ok")
}

// A systemd guest fails without a verdict when systemd (PID 1) crashes,
// and with a named reason when the payload service is killed before it
// reported; neither leaves qemu or temporary files behind.
func TestIntegrationBrokenSystemdGuest(t *testing.T) {
	requireVM(t)
	for _, tc := range []struct {
		name, cmd, reason string
	}{
		{"crash", "kill -SEGV 1; sleep 120", "without a verdict"},
		{"payload-killed", "kill -9 $PPID; sleep 120", "vmtest-payload.service ended without a verdict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := isolatedTemp(t)
			start := time.Now()
			outs, err := Boot(context.Background(), BootConfig{
				Guests:  []GuestConfig{{Name: "broken", Systemd: true}},
				Timeout: 90 * time.Second,
				Command: []string{"sh", "-c", tc.cmd},
				Log:     func(g, l string) { t.Logf("[%s] %s", g, l) },
			})
			if err != nil {
				t.Fatal(err)
			}
			o := outs[0]
			if o.Passed || o.Skipped || !strings.Contains(o.Reason, tc.reason) || strings.Contains(o.Reason, "timed out") {
				t.Errorf("outcome %+v, want a failure with %q", o, tc.reason)
			}
			t.Logf("failed as expected after %v: %s", time.Since(start).Round(time.Millisecond), o.Reason)
			check()
		})
	}
}
