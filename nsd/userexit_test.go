package nsd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUserExitScriptShells runs packaging/scale/nsddevices against a stub
// fabraid under the host's POSIX shells, sourced (mmdevdiscover's way) and
// executed: the stub's lines pass through, the return value is 0 only when
// `fabraid nsd devices --user-exit` exits 0, and a sourcing caller gets
// control back with its options unchanged. The guest test runs it against
// the real fabraid under busybox sh and Debian's ksh93.
func TestUserExitScriptShells(t *testing.T) {
	script, _ := filepath.Abs("../packaging/scale/nsddevices")
	dir := t.TempDir()
	stub := filepath.Join(dir, "fabraid")
	os.WriteFile(stub, []byte("#!/bin/sh\n[ \"$*\" = 'nsd devices --user-exit' ] || exit 9\necho 'nvme7n1 generic'\nexit $STUB_RC\n"), 0o755)
	shells := 0
	for _, shell := range []string{"/bin/sh", "/bin/dash", "/bin/bash", "/bin/busybox"} {
		if _, err := os.Stat(shell); err != nil {
			continue
		}
		shells++
		pre := []string{shell}
		if strings.HasSuffix(shell, "busybox") {
			pre = append(pre, "sh")
		}
		for stubRC, want := range map[string]string{"0": "0", "1": "1", "4": "1"} {
			env := append(os.Environ(), "FABRAID_BIN="+stub, "STUB_RC="+stubRC)
			cmd := exec.Command(pre[0], append(pre[1:], script)...)
			cmd.Env = env
			out, err := cmd.Output()
			code := "0"
			if ee, ok := err.(*exec.ExitError); ok {
				code = strings.TrimSpace(strings.TrimPrefix(ee.String(), "exit status "))
			}
			if string(out) != "nvme7n1 generic\n" || code != want {
				t.Errorf("%s executed, stub exit %s: %q exit %s, want exit %s", shell, stubRC, out, code, want)
			}
			caller := `set -u; . "$1"; rc=$?; case $- in *u*) echo "rc=$rc nounset-kept";; esac`
			cmd = exec.Command(pre[0], append(pre[1:], "-c", caller, "caller", script)...)
			cmd.Env = env
			out, _ = cmd.Output()
			if string(out) != "nvme7n1 generic\nrc="+want+" nounset-kept\n" {
				t.Errorf("%s sourced, stub exit %s: %q, want the line then rc=%s", shell, stubRC, out, want)
			}
		}
	}
	if shells == 0 {
		t.Skip("no POSIX shell on this host")
	}
	os.Remove(stub) // no fabraid at all: nothing printed, 1 (merge)
	cmd := exec.Command("/bin/sh", script)
	cmd.Env = append(os.Environ(), "FABRAID_BIN="+stub)
	if out, err := cmd.Output(); len(out) != 0 || err == nil || !strings.HasSuffix(err.Error(), "exit status 1") {
		t.Errorf("without fabraid: %q %v, want nothing and exit 1", out, err)
	}
}
