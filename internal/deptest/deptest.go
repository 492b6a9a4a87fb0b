// Package deptest checks which packages a binary or package links, so that
// a small program (the CLI that udev and the Storage Scale user exit run)
// stays small: a test names the dependencies its package must never link
// and fails, with the reason, when one appears. It asks the go tool
// (`go list -deps`) of the toolchain that runs the test and skips when that
// tool is absent (a test binary copied into a VM guest).
package deptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Checker is what one test forbids.
type Checker struct {
	// Packages are the import paths (or patterns, "./...") whose
	// dependencies are checked; empty: the package of the test (".").
	Packages []string
	// GOOS and GOARCH are the target (default linux, this GOARCH): the
	// product runs on Linux only.
	GOOS, GOARCH string
	// BadDeps maps a forbidden import path to why it is forbidden. A path
	// also forbids every package under it ("go.etcd.io/etcd" forbids
	// "go.etcd.io/etcd/client/v3").
	BadDeps map[string]string
}

// DaemonOnly are the packages only fabraidd (and its engine and plugin
// processes) may link: what the CLI and the Storage Scale packages, which
// udev and Scale run, must never link. The CLI talks JSON to fabraidd
// (internal/api) and knows a volume's identity from internal/volid.
var DaemonOnly = map[string]string{
	"google.golang.org/grpc":                     "gRPC is the target backend plugins' transport (fabraidd)",
	"github.com/hashicorp/go-plugin":             "target backend plugins are run by fabraidd",
	"go.etcd.io/etcd":                            "the cluster plane runs in fabraidd; the CLI's cluster commands go through its API",
	"github.com/fabraid/fabraid/plugins":         "target backends run in fabraidd",
	"github.com/fabraid/fabraid/internal/volmgr": "the volume manager runs in fabraidd (use internal/api and internal/volid)",
	"github.com/fabraid/fabraid/internal/daemon": "the daemon",
}

// Graph is the import graph of the checked packages: each dependency (the
// packages themselves included) with its imports, in `go list -deps` order
// (a package after its imports).
type Graph struct {
	Order   []string
	Imports map[string][]string
}

// Deps returns the import graph of c's packages for c's target. It skips
// t when no go tool is found.
func (c Checker) Deps(t testing.TB) Graph {
	t.Helper()
	goTool := GoTool()
	if goTool == "" {
		t.Skip("no go tool (GOROOT/bin/go, PATH): cannot list dependencies")
	}
	goos, goarch := c.GOOS, c.GOARCH
	if goos == "" {
		goos = "linux"
	}
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, c.packages()...)
	cmd := exec.Command(goTool, args...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", strings.Join(c.packages(), " "), err, msg)
	}
	g := Graph{Imports: map[string][]string{}}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		g.Order = append(g.Order, f[0])
		g.Imports[f[0]] = f[1:]
	}
	return g
}

// Check fails t for every dependency BadDeps forbids, naming the import
// chain that links it.
func (c Checker) Check(t testing.TB) {
	t.Helper()
	g := c.Deps(t)
	for _, bad := range Forbidden(g.Order, c.BadDeps) {
		t.Errorf("links %s (%s): %s", bad, c.BadDeps[bad], strings.Join(g.Chain(bad), " -> "))
	}
}

func (c Checker) packages() []string {
	if len(c.Packages) == 0 {
		return []string{"."}
	}
	return c.Packages
}

// Chain returns a shortest import chain from one of the checked packages
// (those no other dependency imports) to bad or a package under it; nil
// when there is none.
func (g Graph) Chain(bad string) []string {
	imported := map[string]bool{}
	for _, imps := range g.Imports {
		for _, i := range imps {
			imported[i] = true
		}
	}
	prev := map[string]string{}
	var queue []string
	for _, p := range g.Order {
		if !imported[p] {
			prev[p] = ""
			queue = append(queue, p)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == bad || strings.HasPrefix(p, bad+"/") {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, i := range g.Imports[p] {
			if _, seen := prev[i]; !seen {
				prev[i] = p
				queue = append(queue, i)
			}
		}
	}
	return nil
}

// Forbidden returns the keys of bad that deps contain, the key itself or a
// package under it, sorted.
func Forbidden(deps []string, bad map[string]string) []string {
	var out []string
	for b := range bad {
		if slices.ContainsFunc(deps, func(d string) bool { return d == b || strings.HasPrefix(d, b+"/") }) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

// GoTool returns the go tool of the toolchain that built the test
// (runtime.GOROOT()/bin/go), else the one on PATH, else "".
func GoTool() string {
	//lint:ignore SA1019 the test runs where it was built; GOROOT is the toolchain's root there.
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return ""
}
