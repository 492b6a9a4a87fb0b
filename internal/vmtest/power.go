package vmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Kill cuts the power of another guest: its qemu gets SIGKILL, with no
// clean shutdown, no flush of the guest's page cache and no verdict. Data
// the guest wrote and saw completed is on its disk images (qemu wrote it
// to the image files; their cache mode makes a flush a no-op, like a drive
// with power-loss protection); writes that had not completed may be lost.
// Kill returns once qemu is gone. The killed boot is not a failure: the
// guest's outcome is its last boot's, and a guest that stays off passes.
// Its events and status of that boot are gone (events are per boot, see
// Signal). A guest cannot kill itself.
func (e *Env) Kill(t testing.TB, guest string) {
	t.Helper()
	if err := e.hostRequest("kill " + guest); err != nil {
		t.Fatalf("vmtest: kill %s: %v", guest, err)
	}
}

// Boot boots a guest that is off (killed, or ended by itself) again, with
// the same disk images (every disk attached, including ones RemoveDisk
// took out), MAC, address and hub port; partitions stay as they are. It
// returns once qemu started, not when the guest is up: wait for an event
// the rebooted guest signals. The guest runs its test function again from
// the start with Env.BootNum one higher. Reboots count against the run's
// Timeout and keep the guest's CPU slots.
func (e *Env) Boot(t testing.TB, guest string) {
	t.Helper()
	if err := e.hostRequest("boot " + guest); err != nil {
		t.Fatalf("vmtest: boot %s: %v", guest, err)
	}
}

// Reboot reboots the calling guest cleanly: systemctl reboot, so systemd
// stops every unit in its shutdown order, unmounts and restarts the
// machine; the host then boots the guest again with the same disks
// (Env.Boot) and the test function runs again with BootNum one higher.
// Only for systemd guests (GuestConfig.Systemd). It does not return: the
// payload service is stopped with the rest (no verdict for this boot; a
// boot that does not end in the kernel's "reboot: Restarting system", a
// crash or a hang, fails the guest). The console of the ended boot is
// there for the next one: BootConsole.
func (e *Env) Reboot(t testing.TB) {
	t.Helper()
	if os.Getenv("VMTEST_SYSTEMD") == "" {
		t.Fatal("vmtest: Reboot needs a systemd guest (GuestConfig.Systemd)")
	}
	if err := e.hostRequest("reboot"); err != nil {
		t.Fatalf("vmtest: reboot: %v", err)
	}
	if err := os.WriteFile("/run/vmtest-reboot", nil, 0o644); err != nil {
		t.Fatalf("vmtest: reboot: %v", err)
	}
	if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		fmt.Fprintf(c, "vmtest: clean reboot of boot %d\n", e.BootNum)
		c.Close()
	}
	if out, err := exec.Command("systemctl", "reboot").CombinedOutput(); err != nil {
		os.Remove("/run/vmtest-reboot")
		t.Fatalf("vmtest: systemctl reboot: %v\n%s", err, out)
	}
	select {} // until systemd stops the payload
}

// BootConsole returns the console of the guest's earlier boot number
// boot, which ended with a clean reboot (Reboot): the kernel's and the
// guest's lines as the host read them, one per line.
func (e *Env) BootConsole(t testing.TB, boot int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.Shared, fmt.Sprintf("%s.console.%d", e.Name, boot)))
	if err != nil {
		t.Fatalf("vmtest: console of boot %d: %v", boot, err)
	}
	return string(b)
}

// bootNumber reads fabraid.boot=N from the kernel command line: 1 when
// absent.
func bootNumber() int {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "fabraid.boot="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return 1
}
