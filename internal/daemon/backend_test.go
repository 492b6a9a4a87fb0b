package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/config"
)

// TestTargetBackendPluginChecked: target_backend = nvmet-plugin or spdk
// runs fabraid-plugin-<name> from the plugin directory only, and fabraidd
// refuses to start when that binary is missing or could have been
// replaced by someone else, naming the file and the reason.
func TestTargetBackendPluginChecked(t *testing.T) {
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	newDaemon := func(backend string) error {
		c := config.Default()
		c.NodeName = "n1"
		c.TargetBackend = backend
		c.StateDir = filepath.Join(dir, "state")
		c.APISocket = filepath.Join(dir, "run/api.sock")
		d, err := New(Options{Config: c, Version: "test", HostDir: filepath.Join(dir, "nvme"), EngineBinary: "/bin/false", PluginDir: plugins})
		if err == nil && backend != config.BackendNvmet && (d.plugin == nil || d.plane.DriveTarget() != d.plugin) {
			t.Errorf("%s: no plugin runner, or the drive exporter does not use it", backend)
		}
		return err
	}
	if err := newDaemon(config.BackendNvmet); err != nil {
		t.Fatalf("nvmet (in process) needs no plugin: %v", err)
	}
	nvmetBin := filepath.Join(plugins, "fabraid-plugin-nvmet")
	if err := newDaemon(config.BackendNvmetPlugin); err == nil || !strings.Contains(err.Error(), nvmetBin) {
		t.Fatalf("missing plugin: %v, want an error naming %s", err, nvmetBin)
	}
	for _, name := range []string{"fabraid-plugin-nvmet", "fabraid-plugin-spdk"} {
		if err := os.WriteFile(filepath.Join(plugins, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(plugins, name), 0o775); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	for _, b := range []string{config.BackendNvmetPlugin, config.BackendSPDK} {
		if err := newDaemon(b); err == nil || !strings.Contains(err.Error(), "writable by group") {
			t.Fatalf("%s: group-writable plugin: %v, want a refusal", b, err)
		}
	}
	for _, name := range []string{"fabraid-plugin-nvmet", "fabraid-plugin-spdk"} {
		if err := os.Chmod(filepath.Join(plugins, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{config.BackendNvmetPlugin, config.BackendSPDK} {
		if err := newDaemon(b); err != nil {
			t.Fatalf("%s: a 0755 plugin of ours refused: %v", b, err)
		}
	}
}
