//go:build linux

package nvmet

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/fabraid/fabraid/internal/vmtest"
	knvmet "github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// The test binary doubles as fabraid-plugin-nvmet (as cmd/fabraid-plugin-nvmet
// serves it) when pluginEnv is set.
const pluginEnv = "FABRAID_NVMET_TEST_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(pluginEnv) != "" {
		backend.Serve(&Backend{Root: knvmet.DefaultRoot, SysModule: "/sys/module"}, hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true}))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestIntegrationPluginNvmet: in a 6.12 guest the test process starts the
// plugin through go-plugin, applies an export through it, connects to it
// with nvme-tcp over loopback and reads; re-apply changes nothing; kill -9
// of the plugin gives ErrTransient, the next call runs on a restarted
// plugin, the export is unchanged and the controller still serves I/O.
func TestIntegrationPluginNvmet(t *testing.T) {
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{
			Name: "a", Kernel: vmtest.Kernel612,
			Modules: []string{"nvmet", "nvmet_tcp", "nvme_tcp"},
			Disks:   []vmtest.Disk{{Size: 16 << 20}},
		}},
		Timeout: 150 * time.Second,
	}, pluginGuest)
}

func pluginGuest(t *testing.T, g *vmtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	id, err := nvmf.LoadHostIdentity("/etc/nvme")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(pluginEnv, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := backend.NewRunner(backend.RunnerConfig{Path: exe, Args: []string{"-test.run=^$"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const nqn = "nqn.2026-11.io.fabraid:vol:plugintest"
	const uuid = "7c1e6d0a-2a8f-4f43-9a57-3d1c2a9f0002"
	req := backend.ApplyRequest{Scope: knvmet.VolumeOwnership().SubsystemPrefix, Exports: []backend.Export{{
		NQN: nqn, Serial: "fabplug0001", Model: "fabraid",
		Namespaces: []backend.Namespace{{NSID: 1, Device: g.Disks[0], UUID: uuid, NGUID: strings.ReplaceAll(uuid, "-", "")}},
		Listeners:  []backend.Listener{{Transport: "tcp", Address: "127.0.0.1", ServiceID: "4420"}},
		Hosts:      []backend.Host{{NQN: id.NQN}},
	}}}
	apply := func() backend.ApplyResult {
		t.Helper()
		var res backend.ApplyResult
		err := r.Do(func(b backend.Backend) (err error) { res, err = b.Apply(ctx, req); return err })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := apply(); !res.Changed {
		t.Fatal("first apply changed nothing")
	}
	if res := apply(); res.Changed {
		t.Fatalf("re-apply changed: %q", res.Ops)
	}
	host := nvmf.NewHost()
	c, err := host.Connect(nvmf.Options{Transport: nvmf.TCP, Address: "127.0.0.1", ServiceID: "4420", NQN: nqn, HostNQN: id.NQN, HostID: id.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Disconnect(c.Name)
	if c, err = host.WaitPaths(ctx, c.Name, 1); err != nil {
		t.Fatal(err)
	}
	head := "/dev/" + c.Paths[0].Head
	readBlock(t, head)

	pid := r.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = r.Do(func(b backend.Backend) error { _, err := b.List(ctx, req.Scope); return err })
	for err == nil { // the kill may not have landed before the call was answered
		err = r.Do(func(b backend.Backend) error { _, err := b.List(ctx, req.Scope); return err })
		if r.Starts() > 1 {
			break
		}
	}
	if err != nil && !errors.Is(err, backend.ErrTransient) {
		t.Fatalf("call after kill -9: %v, want ErrTransient", err)
	}
	t.Logf("after kill -9: %v", err)
	if res := apply(); res.Changed || r.Starts() != 2 {
		t.Fatalf("apply on the restarted plugin: changed %v (%q), starts %d", res.Changed, res.Ops, r.Starts())
	}
	readBlock(t, head)
	if cs, err := host.Sysfs.Controllers(); err != nil || len(cs) != 1 || cs[0].State != "live" {
		t.Fatalf("controllers after the plugin crash: %+v %v", cs, err)
	}
	host.Disconnect(c.Name)
	req.Exports = nil
	if res := apply(); !res.Changed {
		t.Fatal("removing the export changed nothing")
	}
}

func readBlock(t *testing.T, dev string) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 8192)
	off := 4096 - int(uintptrOf(buf)%4096)
	if _, err := f.ReadAt(buf[off:off+4096], 0); err != nil {
		t.Fatalf("read %s: %v", dev, err)
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
