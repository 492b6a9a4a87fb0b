package doctor

import (
	"errors"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/fabrictls"
)

// TestTLS: with nvme_tls = required a node that lacks a TLS piece on
// either side is missing a required piece (exit 3) whose detail says it
// exports and imports nothing and names the piece (NVME_TARGET_TCP_TLS,
// NVME_TCP_TLS, tlshd), and whose fix says how to get it; under on the
// same is a warning (plain connections); off is not probed.
func TestTLS(t *testing.T) {
	all := fabrictls.Support{Kernel: true, Keyring: true, TLSHD: true}
	noTLSHD := fabrictls.Support{Kernel: true, Keyring: true}
	noKernel := fabrictls.Support{Keyring: true, TLSHD: true}
	cases := []struct {
		name         string
		mode         fabrictls.Mode
		target, host fabrictls.Support
		err          error
		status       Status
		healthy      bool
		want         []string // in Detail + Fix
	}{
		{"off", fabrictls.Off, fabrictls.Support{}, fabrictls.Support{}, nil, OK, true, []string{"not checked"}},
		{"required, all there", fabrictls.Required, all, all, nil, OK, true, []string{"tlshd running"}},
		{"required, no tlshd", fabrictls.Required, noTLSHD, noTLSHD, nil, Missing, false, []string{"exports no drives", "imports no members", "tlshd", "keyrings=.nvme"}},
		{"required, target kernel without TLS", fabrictls.Required, noKernel, all, nil, Missing, false, []string{"NVME_TARGET_TCP_TLS", "CONFIG_NVME_TARGET_TCP_TLS"}},
		{"required, host kernel without TLS", fabrictls.Required, all, noKernel, nil, Missing, false, []string{"host side lacks a kernel with NVME_TCP_TLS"}},
		{"on, no tlshd", fabrictls.On, noTLSHD, noTLSHD, nil, Warn, true, []string{"stay plain", "tlshd"}},
		{"required, cannot tell", fabrictls.Required, all, all, errors.New("permission denied"), Warn, true, []string{"permission denied"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			probes := okProbes()
			asked := false
			probes.TLS = func() (fabrictls.Support, fabrictls.Support, error) { asked = true; return tc.target, tc.host, tc.err }
			r := (&Doctor{Root: tree(t, complete()), Probes: probes, NVMeTLS: tc.mode}).Run()
			c := find(t, r, "nvme-tls")
			if c.Status != tc.status || r.Healthy() != tc.healthy || c.Required != (tc.mode == fabrictls.Required) {
				t.Errorf("%s %q (fix %q), required %v, healthy %v; want %s, healthy %v", c.Status, c.Detail, c.Fix, c.Required, r.Healthy(), tc.status, tc.healthy)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.Detail+" "+c.Fix, w) {
					t.Errorf("%q / %q lacks %q", c.Detail, c.Fix, w)
				}
			}
			if asked != (tc.mode != fabrictls.Off) {
				t.Errorf("probed %v under nvme_tls = %s", asked, tc.mode)
			}
		})
	}
}
