package manpage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/packaging"
)

func runMan(t *testing.T, rootName, section string) string {
	t.Helper()
	root := &cobra.Command{Use: rootName, Short: "the " + rootName, Run: func(*cobra.Command, []string) {}}
	root.Flags().String("config", config.DefaultPath, "configuration file")
	root.AddCommand(Command(section, rootName+" test"))
	dir := t.TempDir()
	t.Setenv("SOURCE_DATE_EPOCH", "1796000000")
	root.SetArgs([]string{"man", dir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDaemonPages: fabraidd's tree gets a fabraidd(8) with the sections a
// daemon's page needs and a fabraid.conf(5) that documents every key
// internal/config knows, with the shipped default; dated SOURCE_DATE_EPOCH.
func TestDaemonPages(t *testing.T) {
	dir := runMan(t, "fabraidd", "8")
	d, err := os.ReadFile(filepath.Join(dir, "fabraidd.8"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(d)
	for _, sec := range []string{".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH OPERATION", ".SH SYSTEMD", ".SH SIGNALS",
		".SH EXIT STATUS", ".SH FILES", ".SH ENVIRONMENT", ".SH SEE ALSO\n\\fBfabraid.conf\\fR(5)"} {
		if !strings.Contains(page, sec) {
			t.Errorf("fabraidd.8 lacks %q", sec)
		}
	}
	if strings.Index(page, ".SH FILES") > strings.Index(page, ".SH SEE ALSO") || !strings.Contains(page, `"Nov 2026"`) {
		t.Errorf("fabraidd.8: sections out of order or not dated SOURCE_DATE_EPOCH:\n%s", page[:200])
	}
	c, err := os.ReadFile(filepath.Join(dir, "fabraid.conf.5"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(c)
	for _, k := range config.Keys() {
		if !strings.Contains(conf, "\n.B "+k+" =") {
			t.Errorf("fabraid.conf.5 does not document %s", k)
		}
	}
	for _, w := range []string{".B export_port = 4420\n", ".TQ\n.B etcd_client_port = 2379\n", "does not know", "Claims and volume records."} {
		if !strings.Contains(conf, w) {
			t.Errorf("fabraid.conf.5 lacks %q", w)
		}
	}
	// man(1) renders both without warnings, where man is installed.
	if _, err := exec.LookPath("man"); err == nil {
		for _, p := range []string{"fabraidd.8", "fabraid.conf.5"} {
			out, err := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", filepath.Join(dir, p)).CombinedOutput()
			if err != nil || strings.Contains(string(out), "warning:") {
				t.Errorf("man -l %s: %v\n%s", p, err, out)
			}
		}
	}
}

// TestOtherTreesUnchanged: fabraid's own tree (section 1) gets only the
// cobra pages.
func TestOtherTreesUnchanged(t *testing.T) {
	dir := runMan(t, "fabraid", "1")
	if _, err := os.Stat(filepath.Join(dir, "fabraid.conf.5")); err == nil {
		t.Error("fabraid's tree wrote fabraid.conf.5")
	}
	b, _ := os.ReadFile(filepath.Join(dir, "fabraid.1"))
	if strings.Contains(string(b), ".SH OPERATION") {
		t.Error("fabraid.1 got the daemon's sections")
	}
}

// TestParseConfShippedFile: every commented key line of the shipped file
// lands in one entry, with the text above it.
func TestParseConfShippedFile(t *testing.T) {
	intro, entries := parseConf(packaging.DefaultConfig)
	if len(intro) == 0 || !strings.HasPrefix(intro[0], "One \"key = value\" per line") {
		t.Errorf("intro %q", intro)
	}
	n := 0
	for _, e := range entries {
		n += len(e.keys)
		if len(e.text) == 0 {
			t.Errorf("keys %v have no description", e.keys)
		}
	}
	if n != len(config.Keys()) {
		t.Errorf("%d keys in the shipped file, config knows %d", n, len(config.Keys()))
	}
}
