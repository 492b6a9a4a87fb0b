package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/doctor"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// runDoctor runs `fabraid doctor --json` in-process and decodes its report.
func runDoctor(t *testing.T, args ...string) (*doctor.Report, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs(append([]string{"doctor", "--json"}, args...))
	err := root.Execute()
	var rep doctor.Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("doctor --json printed invalid JSON (%v):\n%s", jerr, out.String())
	}
	t.Logf("doctor: %s", out.String())
	return &rep, err
}

func writeHostIdentity(t *testing.T) {
	t.Helper()
	os.MkdirAll("/etc/nvme", 0o755)
	id := "6f1d3c2a-5b4e-4a3f-9c8d-7e6f5a4b3c2d"
	os.WriteFile("/etc/nvme/hostnqn", []byte("nqn.2014-08.org.nvmexpress:uuid:"+id+"\n"), 0o644)
	os.WriteFile("/etc/nvme/hostid", []byte(id+"\n"), 0o644)
}

// TestIntegrationDoctor612: with every module loaded, doctor on Debian's
// 6.12 finds everything, including ublk user recovery asked from the kernel.
func TestIntegrationDoctor612(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{{
		Name: "a", Kernel: vmtest.Kernel612,
		Modules: []string{"configfs", "nvmet", "nvmet_tcp", "nvme_tcp", "ublk_drv"},
	}}}, func(t *testing.T, g *vmtest.Env) {
		writeHostIdentity(t)
		rep, err := runDoctor(t)
		if err != nil {
			t.Errorf("doctor returned %v on a complete node", err)
		}
		for _, c := range rep.Checks {
			if c.Status != doctor.OK {
				t.Errorf("%s: %s: %s", c.Name, c.Status, c.Detail)
			}
			if c.Name == "ublk" && !strings.Contains(c.Detail, "USER_RECOVERY") {
				t.Errorf("ublk detail %q lacks USER_RECOVERY", c.Detail)
			}
		}
	})
}

// TestIntegrationDoctor61: Debian's 6.1 has no ublk; doctor says so, names
// what is needed, exits 3, and finds the NVMe-oF pieces present; nvmet has
// no DH-HMAC-CHAP there: with require_auth (the default) a missing piece
// whose fix names the kernel option and the opt-out, with require_auth =
// false in the configuration a warning.
func TestIntegrationDoctor61(t *testing.T) {
	vmtest.Run(t, vmtest.Options{Guests: []vmtest.GuestConfig{{
		Name: "a", Kernel: vmtest.Kernel61,
		Modules: []string{"configfs", "nvmet", "nvmet_tcp", "nvme_tcp"},
	}}}, func(t *testing.T, g *vmtest.Env) {
		writeHostIdentity(t)
		rep, err := runDoctor(t)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitMissing {
			t.Errorf("doctor error %v, want exit code %d", err, exitMissing)
		}
		for _, c := range rep.Checks {
			switch {
			case c.Name == "ublk":
				if c.Status != doctor.Missing || !strings.Contains(c.Fix, "CONFIG_BLK_DEV_UBLK") {
					t.Errorf("ublk on 6.1: %s, fix %q; want missing with the kernel option named", c.Status, c.Fix)
				}
			case c.Name == "nvmet-auth":
				if c.Status != doctor.Missing || !c.Required || !strings.Contains(c.Fix, "CONFIG_NVME_TARGET_AUTH") ||
					!strings.Contains(c.Fix, "require_auth = false") || !strings.Contains(c.Detail, "refuses to export") {
					t.Errorf("nvmet-auth on 6.1: %s (%s), fix %q; want missing, naming CONFIG_NVME_TARGET_AUTH and require_auth = false", c.Status, c.Detail, c.Fix)
				}
			case c.Status != doctor.OK:
				t.Errorf("%s: %s: %s", c.Name, c.Status, c.Detail)
			}
		}
		conf := filepath.Join(t.TempDir(), "fabraid.conf")
		if err := os.WriteFile(conf, []byte("require_auth = false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, _ = runDoctor(t, "--config", conf)
		for _, c := range rep.Checks {
			if c.Name == "nvmet-auth" && (c.Status != doctor.Warn || c.Required || !strings.Contains(c.Detail, "host NQN alone")) {
				t.Errorf("nvmet-auth on 6.1 with require_auth = false: %s required %v (%s); want a warning", c.Status, c.Required, c.Detail)
			}
		}
	})
}
