//go:build linux

package daemon_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

const nvmetPlugin = "/usr/libexec/fabraid/plugins/fabraid-plugin-nvmet"

// TestIntegrationDaemonPlugin runs fabraidd with target_backend =
// nvmet-plugin on a 6.12 guest: the volume export goes through
// fabraid-plugin-nvmet (the plugin process is what the daemon started;
// create, connect, I/O, delete). The volume is created with --journal 4M
// and volume show reports a journal of at least 4 MiB. With a writer/reader on the volume's
// multipath head, the plugin is killed -9 twice, the second time right
// after fabraidd restarted it (inside the reconcile that restarted it):
// each time fabraidd starts a new plugin, no reconcile fails, the nvmet
// configfs tree is byte-identical before and after, and the consumer's I/O
// never errs.
func TestIntegrationDaemonPlugin(t *testing.T) {
	disks := make([]vmtest.Disk, 3)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 32 << 20}
	}
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{
			Name: "a", Kernel: vmtest.Kernel612, Modules: []string{"ublk_drv", "nvmet_tcp", "nvme_tcp"}, Disks: disks,
			Files: map[string]string{
				"/usr/bin/fabraid":  vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid"),
				"/usr/bin/fabraidd": vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd"),
				nvmetPlugin:         vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid-plugin-nvmet"),
			},
		}},
		Timeout: 150 * time.Second,
	}, pluginDaemonGuest)
}

func pluginDaemonGuest(t *testing.T, g *vmtest.Env) {
	os.MkdirAll("/etc/fabraid", 0o755)
	conf := "node_name = a\nstate_dir = /var/lib/fabraid\napi_socket = /run/fabraid/api.sock\nmetrics_address = 127.0.0.1:9436\ntarget_backend = nvmet-plugin\n"
	if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, append([]string{"drive", "claim"}, g.Disks...)...)
	d := startDaemon(t)
	var in api.Volume
	if err := json.Unmarshal([]byte(mustRun(t, "volume", "create", "vol0", "--data", "2", "--parity", "1", "--journal", "4M", "--json")), &in); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(in.Device, "/dev/nvme") || in.State != "optimal" {
		t.Fatalf("created: %+v", in)
	}
	checkJournal(t, 4<<20)
	pid := pluginPids(t)
	if len(pid) != 1 {
		t.Fatalf("plugin processes after create: %v, want the one fabraidd started", pid)
	}
	before := configfs(t)
	if !strings.Contains(before, "nqn.2026-11.io.fabraid:vol:"+in.UUID) {
		t.Fatalf("no export of %s in configfs:\n%s", in.UUID, before)
	}
	v := startVerifier(t, in.Device)

	// First kill while fabraidd is idle, second as soon as fabraidd has
	// started the new plugin, i.e. inside the reconcile that needs it.
	for i := range 2 {
		old := pid[0]
		t0 := time.Now()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for {
			if pid = pluginPids(t); len(pid) == 1 && pid[0] != old {
				break
			}
			if time.Since(t0) > 40*time.Second {
				t.Fatalf("kill %d: no new plugin 40 s after kill -9 of %d (now %v)", i, old, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("kill %d: plugin %d killed, fabraidd started %d after %v", i, old, pid[0], time.Since(t0))
	}
	// The restarted plugin's Apply finds nothing to do; give the reconcile
	// running it time to end before comparing and reading the counter.
	time.Sleep(2 * time.Second)
	if after := configfs(t); after != before {
		t.Errorf("nvmet configfs changed across plugin kills:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	v.check(t)
	if s := show(t); s.Device != in.Device || s.State != "optimal" {
		t.Errorf("volume after plugin kills: %+v", s)
	}
	if line, _ := metric(t, "fabraid_reconcile_errors_total"); line != "fabraid_reconcile_errors_total 0" {
		t.Errorf("reconcile errors: %q", line)
	}
	v.halt(t)
	t.Logf("verifier: %d ops through the plugin kills, slowest %v", v.ops, v.maxLat)
	v.f.Close()
	mustRun(t, "volume", "delete", "vol0", "--yes")
	if left := configfs(t); strings.Contains(left, "fabraid:vol:") {
		t.Errorf("configfs after delete through the plugin:\n%s", left)
	}
	d.stop(t)
	if p := pluginPids(t); len(p) != 0 {
		t.Errorf("plugin processes after fabraidd stopped: %v", p)
	}
}

// pluginPids returns the live processes running the nvmet plugin binary.
func pluginPids(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == nvmetPlugin {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// configfs dumps the whole nvmet configfs tree: every directory, every
// link with its target and every readable attribute with its value.
func configfs(t *testing.T) string {
	t.Helper()
	const root = "/sys/kernel/config/nvmet"
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, root)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			fmt.Fprintf(&b, "%s -> %s\n", rel, l)
		case e.IsDir():
			fmt.Fprintf(&b, "%s/\n", rel)
		default:
			v, err := os.ReadFile(p)
			if err != nil {
				fmt.Fprintf(&b, "%s: (%v)\n", rel, err)
			} else {
				fmt.Fprintf(&b, "%s = %q\n", rel, strings.TrimSpace(string(v)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// checkJournal: volume show (JSON and text) reports vol0's stripe journal
// as on with at least min bytes per member.
func checkJournal(t *testing.T, min int64) {
	t.Helper()
	in := show(t)
	text := mustRun(t, "volume", "show", "vol0")
	line := ""
	for l := range strings.Lines(text) {
		if strings.HasPrefix(l, "journal:") {
			line = strings.TrimSpace(l)
		}
	}
	t.Logf("vol0 %s", line)
	if !in.Journal || in.JournalBytes < min || !strings.Contains(line, fmt.Sprintf("(%d bytes;", in.JournalBytes)) {
		t.Fatalf("vol0: journal %v of %d bytes, show says %q; want on, at least %d bytes", in.Journal, in.JournalBytes, line, min)
	}
}
