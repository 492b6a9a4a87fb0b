package rpmbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// systemdDefaultStartTimeout is systemd's DefaultTimeoutStartSec (90 s on
// el9 and el10 unless a site changed it): an ExecStartPre= that may run
// longer needs TimeoutStartSec= on its unit.
const systemdDefaultStartTimeout = 90

// TestScaleDropInWaits: the gpfs.service drop-in orders GPFS after fabraidd
// and runs the wait for the volumes as an ExecStartPre= (not a --sync
// preStartup callback, which IBM cautions against) whose failure does not
// stop GPFS ("-"), with a program the package installs, and whose default
// wait ends inside systemd's default start timeout.
func TestScaleDropInWaits(t *testing.T) {
	root := repoRoot(t)
	body, err := os.ReadFile(filepath.Join(root, "packaging/systemd/gpfs.service.d/fabraid.conf"))
	if err != nil {
		t.Fatal(err)
	}
	sec := unitSections(body)
	if sec["Unit"]["After"] != "fabraidd.service" || sec["Unit"]["Wants"] != "fabraidd.service" {
		t.Errorf("[Unit] %v: want After= and Wants=fabraidd.service", sec["Unit"])
	}
	pre := strings.Fields(sec["Service"]["ExecStartPre"])
	if len(pre) == 0 || !strings.HasPrefix(pre[0], "-/") {
		t.Fatalf("ExecStartPre=%v: want -/path (GPFS starts even when the wait fails)", pre)
	}
	prog := strings.TrimPrefix(pre[0], "-")
	p, err := Layout(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := dsts(p)[prog]
	if !ok || f.Kind != Symlink {
		t.Fatalf("ExecStartPre runs %s, which the package does not install as a link to packaging/scale", prog)
	}
	script := filepath.Join(root, "packaging/scale", filepath.Base(f.Src))

	// The script as systemd runs it, with a stand-in fabraid that logs
	// its arguments and answers "wait" with the status in WAIT_RC.
	dir := t.TempDir()
	stub := filepath.Join(dir, "fabraid")
	log := filepath.Join(dir, "calls")
	os.WriteFile(stub, []byte("#!/bin/sh\necho \"$*\" >> "+log+"\n[ \"$1\" = wait ] && { echo 'vol-0: timed out after 60s' >&2; exit ${WAIT_RC:-0}; }\necho nvme0n1 generic\n"), 0o755)
	run := func(env ...string) (int, string, string) {
		os.Remove(log)
		cmd := exec.Command("sh", append([]string{script}, pre[1:]...)...)
		cmd.Env = append(os.Environ(), append(env, "FABRAID_BIN="+stub)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		calls, _ := os.ReadFile(log)
		return code, string(calls), string(out)
	}
	code, calls, out := run("FABRAID_WAIT_TIMEOUT=", "FABRAID_WAIT_VOLUMES=")
	m := regexp.MustCompile(`(?m)^wait --timeout (\d+)s$`).FindStringSubmatch(calls)
	if code != 0 || m == nil {
		t.Fatalf("volumes up: exit %d, calls %q, output %q", code, calls, out)
	}
	timeout := sec["Service"]["TimeoutStartSec"]
	if n, _ := strconv.Atoi(m[1]); timeout == "" && n >= systemdDefaultStartTimeout {
		t.Errorf("default wait %d s is not under systemd's default start timeout (%d s), and the drop-in sets no TimeoutStartSec", n, systemdDefaultStartTimeout)
	}
	if code, _, out := run("WAIT_RC=5"); code != 1 || !strings.Contains(out, "volumes not up, GPFS starts without them: vol-0: timed out") {
		t.Errorf("volumes not up: exit %d %q, want 1 and the reason", code, out)
	}
	if _, calls, _ := run("FABRAID_WAIT_VOLUMES=a,b", "FABRAID_WAIT_TIMEOUT=7"); !strings.Contains(calls, "wait --volumes a,b --timeout 7s\n") {
		t.Errorf("FABRAID_WAIT_VOLUMES/TIMEOUT not passed: %q", calls)
	}
}

// TestScaleCallbacksOnFabraidNodes: every mmaddcallback command the package
// and the docs give registers the callback with -N (the nodes that have
// fabraid: a node without fabraid has nothing to run), and none is a
// --sync preStartup with a long --timeout: the drop-in does that wait.
func TestScaleCallbacksOnFabraidNodes(t *testing.T) {
	root := repoRoot(t)
	files, _ := filepath.Glob(filepath.Join(root, "packaging/scale/fabraid-*"))
	files = append(files, filepath.Join(root, "docs/storage-scale.md"))
	n := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := regexp.MustCompile(`\\\n[#\s]*`).ReplaceAllString(string(b), " ") // join continued lines
		for _, cmd := range regexp.MustCompile(`mmaddcallback [^\n]*`).FindAllString(text, -1) {
			if !strings.Contains(cmd, "--command") {
				continue // prose naming the command
			}
			n++
			if !regexp.MustCompile(` -N \S+`).MatchString(cmd) {
				t.Errorf("%s: %q registers the callback on every node (no -N)", filepath.Base(file), cmd)
			}
			if m := regexp.MustCompile(`--sync --timeout (\d+)`).FindStringSubmatch(cmd); m != nil {
				if s, _ := strconv.Atoi(m[1]); s > systemdDefaultStartTimeout {
					t.Errorf("%s: %q: a --sync callback of %s s", filepath.Base(file), cmd, m[1])
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("found %d mmaddcallback commands, want the scripts' and the docs'", n)
	}
}
