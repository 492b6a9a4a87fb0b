package vmtest

import (
	"os"
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
