package daemon

import (
	"fmt"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/plugins/backend"
)

// targetBackend returns the target backend of config target_backend
// (docs/plugins.md): nil for nvmet (volmgr's default, the kernel backend in
// this process), else a Runner of the plugin binary in the plugin
// directory, checked now and before every (re)start.
func (d *Daemon) targetBackend() (*backend.Runner, error) {
	c := d.opts.Config
	var name string
	var args []string
	switch c.TargetBackend {
	case "", config.BackendNvmet:
		return nil, nil
	case config.BackendNvmetPlugin:
		name = "nvmet"
	case config.BackendSPDK:
		name, args = "spdk", []string{"-socket", c.SPDKSocket}
	default:
		return nil, fmt.Errorf("target_backend %q: unknown", c.TargetBackend)
	}
	dir := d.opts.PluginDir
	if dir == "" {
		dir = backend.Dir
	}
	r, err := backend.NewRunner(backend.RunnerConfig{
		Path: backend.Binary(dir, name), Args: args,
		Logger: backend.SlogLogger(d.log, "backend-plugin."+name),
	})
	if err != nil {
		return nil, fmt.Errorf("target_backend %s: %w", c.TargetBackend, err)
	}
	return r, nil
}
