package volmgr

import (
	"fmt"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/fabraid/fabraid/internal/config"
)

// EngineUnitTemplate is the systemd template unit that runs one volume's
// engine; its instance is the volume name, escaped the systemd way.
const EngineUnitTemplate = "fabraid-engine@.service"

// EngineUnit returns the unit that runs volume's engine, e.g.
// "fabraid-engine@vol\x2d0.service" for "vol-0" (systemd-escape rules:
// '-', a leading '.', and every byte outside [A-Za-z0-9:_.] become \xNN).
func EngineUnit(volume string) string {
	return "fabraid-engine@" + unit.UnitNameEscape(volume) + ".service"
}

// SystemdProbe is what the daemon found out about systemd at startup.
type SystemdProbe struct {
	// Booted: systemd is PID 1 (/run/systemd/system is a directory).
	Booted bool
	// TemplateLoadState is the LoadState systemd reports for an instance
	// of EngineUnitTemplate ("loaded", "not-found", "bad-setting", ...);
	// empty when systemd was not asked.
	TemplateLoadState string
	// Err is why systemd could not be asked (no D-Bus connection, ...).
	Err error
}

// ChooseEngineMode picks how engines run (config.EngineSystemd or
// config.EngineProcess) from the configured engine_mode and the probe. For
// auto it returns process with a warning when systemd is PID 1 but cannot
// run the engine units; for systemd it returns an error then.
func ChooseEngineMode(configured string, p SystemdProbe) (mode, warning string, err error) {
	var why string
	switch {
	case !p.Booted:
		why = "systemd is not PID 1 (/run/systemd/system is missing)"
	case p.Err != nil:
		why = fmt.Sprintf("cannot ask systemd over D-Bus: %v", p.Err)
	case p.TemplateLoadState != "loaded":
		why = fmt.Sprintf("%s is not loadable (LoadState %q; install it and run systemctl daemon-reload)", EngineUnitTemplate, p.TemplateLoadState)
	}
	switch configured {
	case config.EngineProcess:
		return config.EngineProcess, "", nil
	case config.EngineSystemd:
		if why != "" {
			return "", "", fmt.Errorf("engine_mode = systemd: %s", why)
		}
		return config.EngineSystemd, "", nil
	case config.EngineAuto, "":
		if why == "" {
			return config.EngineSystemd, "", nil
		}
		if !p.Booted {
			return config.EngineProcess, "", nil // not a systemd host: nothing to warn about
		}
		return config.EngineProcess, "engines run as child processes: " + why, nil
	}
	return "", "", fmt.Errorf("engine_mode %q: want auto, systemd or process", configured)
}
