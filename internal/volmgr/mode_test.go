package volmgr

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/config"
)

func TestEngineUnit(t *testing.T) {
	for _, tc := range []struct{ vol, unit string }{
		{"vol0", `fabraid-engine@vol0.service`},
		{"vol-0", `fabraid-engine@vol\x2d0.service`},
		{".hidden", `fabraid-engine@\x2ehidden.service`},
		{"..", `fabraid-engine@\x2e..service`},
		{"x:y_z.w", `fabraid-engine@x:y_z.w.service`},
		{"ü", `fabraid-engine@\xc3\xbc.service`},
		{"a+b@c", `fabraid-engine@a\x2bb\x40c.service`},
	} {
		if got := EngineUnit(tc.vol); got != tc.unit {
			t.Errorf("EngineUnit(%q) = %s, want %s", tc.vol, got, tc.unit)
		}
		// Where systemd-escape exists, it must agree.
		if out, err := exec.Command("systemd-escape", "--template", EngineUnitTemplate, "--", tc.vol).Output(); err == nil {
			if got := strings.TrimSpace(string(out)); got != tc.unit {
				t.Errorf("systemd-escape %q = %s, EngineUnit = %s", tc.vol, got, tc.unit)
			}
		}
	}
}

func TestChooseEngineMode(t *testing.T) {
	noBus := errors.New("dial unix /run/dbus/system_bus_socket: no such file")
	ok := SystemdProbe{Booted: true, TemplateLoadState: "loaded"}
	missing := SystemdProbe{Booted: true, TemplateLoadState: "not-found"}
	for _, tc := range []struct {
		name       string
		configured string
		probe      SystemdProbe
		mode       string
		warn, err  string
	}{
		{"auto, systemd and template", config.EngineAuto, ok, config.EngineSystemd, "", ""},
		{"auto, no systemd", config.EngineAuto, SystemdProbe{}, config.EngineProcess, "", ""},
		{"auto, template missing", config.EngineAuto, missing, config.EngineProcess, `fabraid-engine@.service is not loadable (LoadState "not-found"`, ""},
		{"auto, bad template", config.EngineAuto, SystemdProbe{Booted: true, TemplateLoadState: "bad-setting"}, config.EngineProcess, "bad-setting", ""},
		{"auto, no D-Bus", config.EngineAuto, SystemdProbe{Booted: true, Err: noBus}, config.EngineProcess, "cannot ask systemd over D-Bus", ""},
		{"empty is auto", "", ok, config.EngineSystemd, "", ""},
		{"systemd", config.EngineSystemd, ok, config.EngineSystemd, "", ""},
		{"systemd, no systemd", config.EngineSystemd, SystemdProbe{}, "", "", "engine_mode = systemd: systemd is not PID 1"},
		{"systemd, template missing", config.EngineSystemd, missing, "", "", "engine_mode = systemd: fabraid-engine@.service is not loadable"},
		{"systemd, no D-Bus", config.EngineSystemd, SystemdProbe{Booted: true, Err: noBus}, "", "", "no such file"},
		{"process under systemd", config.EngineProcess, ok, config.EngineProcess, "", ""},
		{"process, no systemd", config.EngineProcess, SystemdProbe{}, config.EngineProcess, "", ""},
		{"unknown", "docker", ok, "", "", `engine_mode "docker"`},
	} {
		mode, warn, err := ChooseEngineMode(tc.configured, tc.probe)
		if mode != tc.mode || !contains(warn, tc.warn) || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: got %q, warning %q, error %v; want %q, %q, %q", tc.name, mode, warn, err, tc.mode, tc.warn, tc.err)
		}
	}
}

// contains is strings.Contains, except that want "" means got must be "".
func contains(got, want string) bool {
	if want == "" {
		return got == ""
	}
	return strings.Contains(got, want)
}
