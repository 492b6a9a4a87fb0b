package doctor

import (
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/ublk"
)

// On Debian's 7.2.13 GET_FEATURES answers 0xfffff (guest test
// TestIntegrationUblkKernel7): the ublk check names every flag, the ones
// 6.12 lacks included, as the live probe in cmd/fabraid builds them.
func TestUblkFeatures72(t *testing.T) {
	p := okProbes()
	p.UblkFeatures = func() (uint64, []string, error) {
		f := ublk.Features(0xfffff)
		return uint64(f), f.Names(), nil
	}
	files := complete()
	files["/proc/sys/kernel/osrelease"] = "7.2.13+deb14-amd64\n"
	r := (&Doctor{Root: tree(t, files), Probes: p}).Run()
	c := find(t, r, "ublk")
	if c.Status != OK || !strings.HasPrefix(c.Detail, "features 0xfffff: ") {
		t.Fatalf("ublk: %s (%s)", c.Status, c.Detail)
	}
	for _, name := range []string{"ZERO_COPY", "USER_COPY", "USER_RECOVERY", "UPDATE_SIZE", "AUTO_BUF_REG", "QUIESCE", "PER_IO_DAEMON", "BUF_REG_OFF_DAEMON"} {
		if !strings.Contains(" "+c.Detail+" ", " "+name+" ") {
			t.Errorf("ublk detail does not name %s: %s", name, c.Detail)
		}
	}
	if strings.Count(c.Detail, "0x") != 1 { // the mask itself; no unnamed rest
		t.Errorf("unnamed bits left in %q", c.Detail)
	}
}
