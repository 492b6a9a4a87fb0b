package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files under a temporary root: a recorded /proc, /sys, /etc
// layout. The checks only read these files; kernel behaviour itself is
// covered by the guest test in cmd/fabraid.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		dir := filepath.Dir(full)
		if strings.HasSuffix(p, "/") {
			dir = full
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, "/") {
			continue
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func complete() map[string]string {
	return map[string]string{
		"/proc/sys/kernel/osrelease":                 "6.12.117+deb12-amd64\n",
		"/proc/mounts":                               "configfs /sys/kernel/config configfs rw,relatime 0 0\n",
		"/proc/filesystems":                          "nodev\tconfigfs\n",
		"/sys/module/nvmet/":                         "",
		"/sys/kernel/config/nvmet/":                  "",
		"/sys/module/nvmet_tcp/":                     "",
		"/sys/module/nvme_tcp/":                      "",
		"/dev/nvme-fabrics":                          "",
		"/sys/module/nvme_core/parameters/multipath": "Y\n",
		"/sys/module/ublk_drv/":                      "",
		"/dev/ublk-control":                          "",
		"/etc/nvme/hostnqn":                          "nqn.2014-08.org.nvmexpress:uuid:0b9c4f4e-1111-4222-8333-944445555666\n",
		"/etc/nvme/hostid":                           "0b9c4f4e-1111-4222-8333-944445555666\n",
	}
}

func okProbes() Probes {
	return Probes{
		UblkFeatures: func() (uint64, []string, error) { return 0x1fe, []string{"USER_RECOVERY", "USER_COPY"}, nil },
		IOUring:      func() error { return nil },
		NvmetAuth:    func() (bool, error) { return true, nil },
	}
}

func find(t *testing.T, r *Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, r.Checks)
	return Check{}
}

func TestCompleteNodeIsHealthy(t *testing.T) {
	r := (&Doctor{Root: tree(t, complete()), Probes: okProbes()}).Run()
	for _, c := range r.Checks {
		if c.Status != OK {
			t.Errorf("%s: %s (%s), want ok", c.Name, c.Status, c.Detail)
		}
	}
	if !r.Healthy() || r.Kernel != "6.12.117+deb12-amd64" {
		t.Errorf("healthy=%v kernel=%q", r.Healthy(), r.Kernel)
	}
}

// Each broken piece is reported as missing, with a fix that names the
// module, command or kernel option to get it.
func TestMissingPiecesNameTheirFix(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(map[string]string, *Probes)
		check   string
		status  Status
		fixHint string
	}{
		{"configfs not mounted", func(f map[string]string, _ *Probes) { f["/proc/mounts"] = "proc /proc proc rw 0 0\n" },
			"configfs", Missing, "mount -t configfs"},
		{"no configfs at all", func(f map[string]string, _ *Probes) {
			f["/proc/mounts"] = ""
			f["/proc/filesystems"] = "nodev\tproc\n"
		}, "configfs", Missing, "modprobe configfs"},
		{"nvmet unloaded", func(f map[string]string, _ *Probes) { delete(f, "/sys/module/nvmet/") }, "nvmet", Missing, "modprobe nvmet"},
		{"nvme_tcp unloaded", func(f map[string]string, _ *Probes) { delete(f, "/sys/module/nvme_tcp/") }, "nvme-tcp", Missing, "modprobe nvme_tcp"},
		{"multipath off", func(f map[string]string, _ *Probes) { f["/sys/module/nvme_core/parameters/multipath"] = "N\n" },
			"nvme-multipath", Missing, "nvme_core.multipath=Y"},
		{"no ublk (6.1)", func(f map[string]string, _ *Probes) { delete(f, "/sys/module/ublk_drv/") }, "ublk", Missing, "CONFIG_BLK_DEV_UBLK"},
		{"ublk without recovery", func(_ map[string]string, p *Probes) {
			p.UblkFeatures = func() (uint64, []string, error) { return 0x2, []string{"URING_CMD_COMP_IN_TASK"}, nil }
		}, "ublk", Missing, "USER_RECOVERY"},
		{"ublk probe error", func(_ map[string]string, p *Probes) {
			p.UblkFeatures = func() (uint64, []string, error) { return 0, nil, errors.New("operation not permitted") }
		}, "ublk", Missing, "root"},
		{"io_uring disabled", func(f map[string]string, _ *Probes) { f["/proc/sys/kernel/io_uring_disabled"] = "2\n" },
			"io_uring", Missing, "io_uring_disabled=0"},
		{"io_uring restricted", func(f map[string]string, _ *Probes) { f["/proc/sys/kernel/io_uring_disabled"] = "1\n" },
			"io_uring", Warn, ""},
		{"io_uring setup fails", func(_ map[string]string, p *Probes) {
			p.IOUring = func() error { return errors.New("function not implemented") }
		},
			"io_uring", Missing, "CONFIG_IO_URING"},
		{"no hostnqn", func(f map[string]string, _ *Probes) { delete(f, "/etc/nvme/hostnqn") }, "hostnqn", Missing, "/etc/nvme/hostnqn"},
		{"bad hostnqn", func(f map[string]string, _ *Probes) { f["/etc/nvme/hostnqn"] = "my-host\n" }, "hostnqn", Missing, "gen-hostnqn"},
		{"bad hostid", func(f map[string]string, _ *Probes) { f["/etc/nvme/hostid"] = "1234\n" }, "hostid", Missing, "UUID"},
		{"hostid differs from hostnqn", func(f map[string]string, _ *Probes) {
			f["/etc/nvme/hostid"] = "11111111-2222-4333-8444-555555555555\n"
		}, "hostid", Warn, "hostnqn"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, probes := complete(), okProbes()
			tc.mutate(files, &probes)
			r := (&Doctor{Root: tree(t, files), Probes: probes}).Run()
			c := find(t, r, tc.check)
			if c.Status != tc.status {
				t.Fatalf("%s: status %s (%s), want %s", tc.check, c.Status, c.Detail, tc.status)
			}
			if !strings.Contains(c.Fix, tc.fixHint) {
				t.Errorf("%s: fix %q does not mention %q", tc.check, c.Fix, tc.fixHint)
			}
			if want := tc.status != Missing; r.Healthy() != want {
				t.Errorf("Healthy() = %v, want %v", r.Healthy(), want)
			}
		})
	}
}

// On the machine running the tests (CI's kernel has no nvmet or ublk) the
// doctor must produce a complete report without panicking, every missing
// piece carrying a fix.
func TestThisHost(t *testing.T) {
	r := (&Doctor{Root: "/"}).Run()
	if len(r.Checks) != 11 {
		t.Fatalf("%d checks, want 11", len(r.Checks))
	}
	for _, c := range r.Checks {
		if c.Status == Missing && c.Fix == "" {
			t.Errorf("%s missing without a fix", c.Name)
		}
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil || !strings.Contains(b.String(), "kernel ") {
		t.Fatalf("WriteText: %v\n%s", err, b.String())
	}
}

// TestNvmetAuth: nvmet without DH-HMAC-CHAP (Debian's 6.1) is a warning
// that says the cluster's exports allow hosts by NQN alone and names the
// kernel option; the node stays healthy (it works, unauthenticated).
func TestNvmetAuth(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(map[string]string, *Probes)
		status Status
		want   string // in Detail or Fix
	}{
		{"probe: auth", func(map[string]string, *Probes) {}, OK, "DH-HMAC-CHAP"},
		{"probe: no auth (6.1), require_auth = false", func(_ map[string]string, p *Probes) {
			p.NvmetAuth = func() (bool, error) { return false, nil }
		}, Warn, "CONFIG_NVME_TARGET_AUTH"},
		{"no probe, a host entry with dhchap_key", func(f map[string]string, p *Probes) {
			p.NvmetAuth = nil
			f["/sys/kernel/config/nvmet/hosts/nqn.h/dhchap_key"] = ""
		}, OK, "DH-HMAC-CHAP"},
		{"probe fails, a host entry without dhchap_key, require_auth = false", func(f map[string]string, p *Probes) {
			p.NvmetAuth = func() (bool, error) { return false, errors.New("permission denied") }
			f["/sys/kernel/config/nvmet/hosts/nqn.h/"] = ""
		}, Warn, "host NQN alone"},
		{"probe fails, nothing to look at", func(_ map[string]string, p *Probes) {
			p.NvmetAuth = func() (bool, error) { return false, errors.New("permission denied") }
		}, Warn, "permission denied"},
		{"nvmet unloaded", func(f map[string]string, _ *Probes) { delete(f, "/sys/module/nvmet/") }, Warn, "modprobe nvmet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, probes := complete(), okProbes()
			tc.mutate(files, &probes)
			c := find(t, (&Doctor{Root: tree(t, files), Probes: probes, AllowUnauthenticated: true}).Run(), "nvmet-auth")
			if c.Status != tc.status || !strings.Contains(c.Detail+" "+c.Fix, tc.want) || c.Required {
				t.Errorf("nvmet-auth: %s %q fix %q required %v; want %s, not required, mentioning %q", c.Status, c.Detail, c.Fix, c.Required, tc.status, tc.want)
			}
		})
	}
}

// TestNvmetAuthRequired: with require_auth (the default: Doctor's zero
// AllowUnauthenticated) nvmet without DH-HMAC-CHAP is a missing required
// piece (exit 3) whose fix names the kernel option and the opt-out; with
// auth, or when doctor cannot tell, the node stays healthy.
func TestNvmetAuthRequired(t *testing.T) {
	files, probes := complete(), okProbes()
	probes.NvmetAuth = func() (bool, error) { return false, nil }
	r := (&Doctor{Root: tree(t, files), Probes: probes}).Run()
	c := find(t, r, "nvmet-auth")
	if c.Status != Missing || !c.Required || r.Healthy() {
		t.Errorf("no auth, require_auth: %s required %v healthy %v; want missing, required, unhealthy", c.Status, c.Required, r.Healthy())
	}
	for _, w := range []string{"CONFIG_NVME_TARGET_AUTH", "require_auth = false"} {
		if !strings.Contains(c.Fix, w) {
			t.Errorf("fix %q lacks %q", c.Fix, w)
		}
	}
	if !strings.Contains(c.Detail, "refuses to export") {
		t.Errorf("detail %q does not say the node refuses to export", c.Detail)
	}
	probes.NvmetAuth = func() (bool, error) { return true, nil }
	if r := (&Doctor{Root: tree(t, files), Probes: probes}).Run(); !r.Healthy() || find(t, r, "nvmet-auth").Status != OK {
		t.Errorf("auth, require_auth: %+v", find(t, r, "nvmet-auth"))
	}
	probes.NvmetAuth = func() (bool, error) { return false, errors.New("permission denied") }
	if r := (&Doctor{Root: tree(t, files), Probes: probes}).Run(); !r.Healthy() || find(t, r, "nvmet-auth").Status != Warn {
		t.Errorf("cannot tell, require_auth: %+v", find(t, r, "nvmet-auth"))
	}
}

// TestModuleFixesNamePackageLookup: a missing module's fix says how to find
// the RHEL package that holds it (modinfo, dnf provides with the module's
// file name), not a package name nobody checked.
func TestModuleFixesNamePackageLookup(t *testing.T) {
	for check, file := range map[string]string{"nvmet": "nvmet", "nvmet-tcp": "nvmet-tcp", "nvme-tcp": "nvme-tcp", "ublk": "ublk_drv"} {
		files := complete()
		for m := range map[string]bool{"nvmet": true, "nvmet_tcp": true, "nvme_tcp": true, "ublk_drv": true} {
			delete(files, "/sys/module/"+m+"/")
		}
		d := &Doctor{Root: tree(t, files)}
		var c *Check
		for _, x := range d.Run().Checks {
			if x.Name == check {
				c = &x
			}
		}
		if c == nil || c.Status != Missing {
			t.Fatalf("%s: %+v", check, c)
		}
		for _, w := range []string{"modinfo -n ", "dnf provides '*/" + file + ".ko*'", "kernel-modules-extra", "$(uname -r)"} {
			if !strings.Contains(c.Fix, w) {
				t.Errorf("%s fix %q lacks %q", check, c.Fix, w)
			}
		}
	}
}
