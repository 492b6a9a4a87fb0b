package vmtest

import (
	"os"
	"os/exec"
	"path"
	"testing"
)

// TestTLSHDFiles fetches tlshd (network and apt needed, like the guest
// kernels) and checks that the file set has tlshd, the loader and libc.
func TestTLSHDFiles(t *testing.T) {
	if !Enabled() {
		t.Skip("FABRAID_VMTEST=1 not set: tlshd is fetched from Debian only for VM tests")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("no apt-get on this host")
	}
	files := TLSHD(t)
	for _, want := range []string{TLSHDPath, "/lib64/ld-linux-x86-64.so.2", path.Join(TLSHDLibDir, "libc.so.6"), path.Join(TLSHDLibDir, "libgnutls.so.30")} {
		hp, ok := files[want]
		if !ok {
			t.Errorf("no %s in %v", want, files)
			continue
		}
		if _, err := os.Stat(hp); err != nil {
			t.Errorf("%s: %v", want, err)
		}
	}
	t.Logf("%d files", len(files))
}
