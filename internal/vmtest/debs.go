package vmtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

// debPackage is one Debian binary package as apt's lists describe it.
type debPackage struct {
	Name    string
	Version string
	Depends []string // first alternative of each Depends and Pre-Depends entry, bare names
}

// debStopList names packages that the closure walk does not follow: they
// are needed to install or configure packages (maintainer scripts, package
// management, PAM login stacks), not to run systemd and dbus in a guest.
// A name ending in "*" is a prefix.
var debStopList = []string{
	"perl*", "libperl*", "debconf", "cdebconf", "debconf-2.0", "dpkg", "adduser", "passwd",
	"install-info", "init-system-helpers", "usrmerge", "usr-is-merged", "tar",
	"libpam-modules*", "libpam-runtime", "lsb-base", "sysvinit-utils", "debianutils",
	"readline-common", "login", "libdebian-installer*",
}

// stopped reports whether the closure walk must not follow pkg.
func stopped(pkg string, stop []string) bool {
	for _, s := range stop {
		if p, ok := strings.CutSuffix(s, "*"); ok {
			if strings.HasPrefix(pkg, p) {
				return true
			}
		} else if pkg == s {
			return true
		}
	}
	return false
}

// depNameRE takes the bare package name off a dependency alternative:
// "libc6 (>= 2.34)" -> libc6, "perl:any" -> perl.
var depNameRE = regexp.MustCompile(`^\s*([a-z0-9][a-z0-9+.-]*)`)

// parseDepends turns a Depends field into the first alternative of each
// entry.
func parseDepends(field string) []string {
	var names []string
	for _, entry := range strings.Split(field, ",") {
		first, _, _ := strings.Cut(entry, "|")
		if m := depNameRE.FindStringSubmatch(first); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// parseAptShow parses the stanzas of `apt-cache show --no-all-versions`.
func parseAptShow(out []byte) map[string]debPackage {
	pkgs := map[string]debPackage{}
	var cur debPackage
	flush := func() {
		if cur.Name != "" {
			pkgs[cur.Name] = cur
		}
		cur = debPackage{}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			cur.Name = v
		case "Version":
			cur.Version = v
		case "Depends", "Pre-Depends":
			cur.Depends = append(cur.Depends, parseDepends(v)...)
		}
	}
	flush()
	return pkgs
}

// aptShow describes packages with their candidate versions.
type aptShow func(names []string) (map[string]debPackage, error)

// aptCacheShow asks the local apt lists (no network).
func aptCacheShow(names []string) (map[string]debPackage, error) {
	args := append([]string{"show", "--no-all-versions"}, names...)
	out, err := exec.Command("apt-cache", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("vmtest: apt-cache show %s: %w", strings.Join(names, " "), err)
	}
	return parseAptShow(out), nil
}

// resolveClosure walks Depends and Pre-Depends (first alternatives) from
// roots, not following the stop list, and returns the packages sorted by
// name. A package apt does not know (or knows only as a virtual package)
// is an error naming it and who needs it.
func resolveClosure(roots, stop []string, show aptShow) ([]debPackage, error) {
	seen := map[string]debPackage{}
	neededBy := map[string]string{}
	queue := append([]string(nil), roots...)
	for _, r := range roots {
		neededBy[r] = "(requested)"
	}
	for len(queue) > 0 {
		batch := queue
		queue = nil
		got, err := show(batch)
		if err != nil {
			return nil, err
		}
		for _, name := range batch {
			p, ok := got[name]
			if !ok || p.Version == "" {
				return nil, fmt.Errorf("vmtest: package %s (needed by %s) is unknown to apt or purely virtual: add it to the stop list or run apt-get update", name, neededBy[name])
			}
			seen[name] = p
			for _, d := range p.Depends {
				if _, dup := neededBy[d]; dup || stopped(d, stop) {
					continue
				}
				neededBy[d] = name
				queue = append(queue, d)
			}
		}
	}
	out := make([]debPackage, 0, len(seen))
	for _, p := range seen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
