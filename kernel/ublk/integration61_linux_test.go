//go:build linux

package ublk

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationUblkKernel61 checks the message on a kernel without ublk:
// Debian's 6.1 is built without CONFIG_BLK_DEV_UBLK.
func TestIntegrationUblkKernel61(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{{
		Name: "old", Kernel: vmtest.Kernel61,
		Files: map[string]string{"/usr/bin/fabraid": vmtest.BuildBinary(t, fabraidPkg)},
	}}}, func(t *testing.T, g *vmtest.Env) {
		_, err := OpenControl()
		if !errors.Is(err, ErrNotSupported) {
			t.Fatalf("OpenControl on 6.1: %v, want ErrNotSupported", err)
		}
		t.Logf("OpenControl: %v", err)
		out, err := exec.Command("/usr/bin/fabraid", "ublk", "serve", "--backend", "mem:4M").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("fabraid ublk serve on 6.1: %v, want exit code 3; output: %s", err, out)
		}
		for _, want := range []string{"ublk_drv", "requires", "CONFIG_BLK_DEV_UBLK"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("message %q does not mention %q", out, want)
			}
		}
		t.Logf("fabraid ublk serve: %s", out)
	})
}
