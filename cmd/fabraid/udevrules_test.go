package main

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/drive"
)

// A small evaluator of udev rules, enough for packaging/udev/69-fabraid.rules:
// it runs the rules for one event as systemd-udevd does (match keys first,
// then assignments, GOTO/LABEL, IMPORT{program} and IMPORT{cmdline} as
// matches that fail when they import nothing) and records which programs
// would run. A key or operator it does not know fails the test, so the rule
// cannot grow syntax the evaluator silently ignores. TestIntegrationUdevRules
// checks the same rules under Debian's systemd-udevd.

// udevEvent is one uevent as the rules see it.
type udevEvent struct {
	action, kernel, devnode string
	env                     map[string]string // uevent and earlier rules' properties (DEVTYPE, DM_*, SYSTEMD_READY, ID_FS_*)
	attr                    map[string]string // the device's sysfs attributes
	attrs                   map[string]string // attributes of its parents (ATTRS also matches these)
}

// udevOutcome is what the rules did.
type udevOutcome struct {
	env      map[string]string
	programs []string // IMPORT{program} command lines, in order
	run      []string
	tags     []string
	symlinks []string
}

type udevToken struct{ key, attr, op, val string }

var udevTokenRE = regexp.MustCompile(`^\s*([A-Z]+)(?:\{([^}]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)`)

func parseUdevRules(t *testing.T, text string) [][]udevToken {
	t.Helper()
	var rules [][]udevToken
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var rule []udevToken
		for rest := line; strings.TrimSpace(rest) != ""; {
			m := udevTokenRE.FindStringSubmatch(rest)
			if m == nil {
				t.Fatalf("rules line %d: cannot parse %q", n+1, rest)
			}
			rule = append(rule, udevToken{m[1], m[2], m[3], m[4]})
			rest = rest[len(m[0]):]
		}
		rules = append(rules, rule)
	}
	return rules
}

// udevMatch is udev's pattern match: '|' separates alternatives, each a
// shell glob; "" matches only the empty value.
func udevMatch(pattern, value string) bool {
	for _, alt := range strings.Split(pattern, "|") {
		if ok, _ := path.Match(alt, value); ok {
			return true
		}
	}
	return false
}

func udevSubst(t *testing.T, s string, ev udevEvent, env map[string]string) string {
	t.Helper()
	return regexp.MustCompile(`\$(devnode|kernel|env\{[^}]*\}|attr\{[^}]*\})`).ReplaceAllStringFunc(s, func(m string) string {
		switch {
		case m == "$devnode":
			return ev.devnode
		case m == "$kernel":
			return ev.kernel
		case strings.HasPrefix(m, "$env{"):
			return env[m[5:len(m)-1]]
		default:
			return ev.attr[m[6:len(m)-1]]
		}
	})
}

// evalUdevRules runs rules for ev. cmdline is the kernel command line's
// key=value pairs ("" for a bare key); program answers an IMPORT{program}
// with its KEY=VALUE output and whether it exited 0.
func evalUdevRules(t *testing.T, rules [][]udevToken, ev udevEvent, cmdline map[string]string, program func(cmd string) (string, bool)) udevOutcome {
	t.Helper()
	out := &udevOutcome{env: map[string]string{"SUBSYSTEM": "block", "ACTION": ev.action}}
	for k, v := range ev.env {
		out.env[k] = v
	}
	labels := map[string]int{}
	for i, r := range rules {
		for _, tok := range r {
			if tok.key == "LABEL" {
				labels[tok.val] = i
			}
		}
	}
	for i := 0; i < len(rules); i++ {
		r := rules[i]
		matched := true
		for _, tok := range r {
			var ok bool
			switch {
			case tok.op != "==" && tok.op != "!=" && tok.key != "IMPORT":
				continue // an assignment, below
			case tok.key == "IMPORT" && tok.op == "=":
				ok = udevImport(t, tok, ev, out, cmdline, program)
			case tok.key == "IMPORT":
				t.Fatalf("rule %d: IMPORT with %s", i, tok.op)
			default:
				var v string
				var has bool
				switch tok.key {
				case "ACTION":
					v, has = ev.action, true
				case "SUBSYSTEM":
					v, has = "block", true
				case "KERNEL":
					v, has = ev.kernel, true
				case "ENV":
					v, has = out.env[tok.attr]
				case "ATTR":
					v, has = ev.attr[tok.attr]
				case "ATTRS":
					v, has = ev.attr[tok.attr]
					if !has {
						v, has = ev.attrs[tok.attr]
					}
				default:
					t.Fatalf("rule %d: match key %s not known to the evaluator", i, tok.key)
				}
				ok = udevMatch(tok.val, v)
				if (tok.key == "ATTR" || tok.key == "ATTRS") && !has {
					ok = false // a missing attribute matches neither == nor !=
				} else if tok.op == "!=" {
					ok = !ok
				}
			}
			if !ok {
				matched = false
				break
			}
		}
		if !matched {
			continue
		}
		jump := ""
		for _, tok := range r {
			if tok.op == "==" || tok.op == "!=" || tok.key == "IMPORT" {
				continue
			}
			val := udevSubst(t, tok.val, ev, out.env)
			switch tok.key {
			case "ENV":
				switch {
				case tok.op == "+=":
					out.env[tok.attr] += val
				case tok.op == "=" && val == "":
					delete(out.env, tok.attr)
				case tok.op == "=":
					out.env[tok.attr] = val
				default:
					t.Fatalf("rule %d: ENV %s", i, tok.op)
				}
			case "TAG":
				out.tags = append(out.tags, val)
			case "SYMLINK":
				out.symlinks = append(out.symlinks, val)
			case "RUN":
				out.run = append(out.run, val)
			case "GOTO":
				jump = tok.val
			case "LABEL":
			default:
				t.Fatalf("rule %d: assignment key %s not known to the evaluator", i, tok.key)
			}
		}
		if jump != "" {
			j, ok := labels[jump]
			if !ok {
				t.Fatalf("GOTO %q: no such LABEL", jump)
			}
			i = j - 1 // the LABEL line itself runs next
		}
	}
	return *out
}

func udevImport(t *testing.T, tok udevToken, ev udevEvent, out *udevOutcome, cmdline map[string]string, program func(string) (string, bool)) bool {
	t.Helper()
	switch tok.attr {
	case "cmdline":
		v, ok := cmdline[tok.val]
		if !ok {
			return false
		}
		if v == "" {
			v = "1"
		}
		out.env[tok.val] = v
		return true
	case "program":
		cmd := udevSubst(t, tok.val, ev, out.env)
		out.programs = append(out.programs, cmd)
		text, ok := program(cmd)
		if !ok {
			return false
		}
		for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				out.env[k] = v
			}
		}
		return true
	}
	t.Fatalf("IMPORT{%s} not known to the evaluator", tok.attr)
	return false
}

func fabraidRules(t *testing.T) [][]udevToken {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "packaging", "udev", "69-fabraid.rules"))
	if err != nil {
		t.Fatal(err)
	}
	return parseUdevRules(t, string(b))
}

// udevDisk is an add event of a whole disk with no other rule's flags.
func udevDisk(kernel string) udevEvent {
	return udevEvent{action: "add", kernel: kernel, devnode: "/dev/" + kernel,
		env: map[string]string{"DEVTYPE": "disk"}, attr: map[string]string{}, attrs: map[string]string{}}
}

// anyMember answers every udev-probe DEVNODE as a member: what the rules do
// with a device then depends on the rules alone.
func anyMember(cmd string) (string, bool) {
	if !strings.HasPrefix(cmd, "/usr/bin/fabraid udev-probe /") {
		return "", false
	}
	return strings.Join(probeLines(probeSample("vol0", "a")), "\n"), true
}

func probedDevnodes(out udevOutcome) []string {
	var devs []string
	for _, p := range out.programs {
		if dev, ok := strings.CutPrefix(p, "/usr/bin/fabraid udev-probe /"); ok {
			devs = append(devs, "/"+dev)
		}
	}
	return devs
}

// The rules probe exactly the devices the drive inventory can claim (whole
// disks whose names it lists) and skip, before IMPORT{program}, every other
// device type, every device another rule's flag puts aside, and every disk
// when the kernel command line says fabraid.probe=0. Each case here is one
// line of the rules: removing the line makes its case fail.
func TestUdevRulesProbeOnlyClaimable(t *testing.T) {
	rules := fabraidRules(t)
	with := func(ev udevEvent, f func(*udevEvent)) udevEvent { f(&ev); return ev }
	probed := map[string]udevEvent{
		"sata/sas disk":        udevDisk("sda"),
		"disk 27":              udevDisk("sdaa"),
		"virtio disk":          udevDisk("vdb"),
		"xen disk":             udevDisk("xvda"),
		"mmc":                  udevDisk("mmcblk0"),
		"change event":         with(udevDisk("sdb"), func(e *udevEvent) { e.action = "change" }),
		"visible (hidden=0)":   with(udevDisk("nvme0n2"), func(e *udevEvent) { e.attr["hidden"] = "0" }),
		"local nvme":           with(udevDisk("nvme0n1"), func(e *udevEvent) { e.attrs["subsysnqn"] = "nqn.2014.08.org.nvmexpress:uuid:1" }),
		"remote fabraid drive": with(udevDisk("nvme3n1"), func(e *udevEvent) { e.attrs["subsysnqn"] = "nqn.2026-11.io.fabraid:drive:S4EW" }),
		"fabraid.probe=1":      udevDisk("sdc"),
	}
	for name, ev := range probed {
		for _, p := range drive.NotDrivePrefixes {
			if strings.HasPrefix(ev.kernel, p) {
				t.Fatalf("%s: %s is no drive for the inventory (prefix %q): fix the test", name, ev.kernel, p)
			}
		}
		cmdline := map[string]string{}
		if name == "fabraid.probe=1" {
			cmdline["fabraid.probe"] = "1"
		}
		out := evalUdevRules(t, rules, ev, cmdline, anyMember)
		if got := probedDevnodes(out); !slices.Equal(got, []string{ev.devnode}) {
			t.Errorf("%s (%s): probed %q, want exactly %s", name, ev.kernel, got, ev.devnode)
		}
		if out.env["FABRAID_MEMBER"] != "1" || out.env["ID_FS_TYPE"] != "fabraid_member" {
			t.Errorf("%s: a member got %v", name, out.env)
		}
	}

	skipped := map[string]udevEvent{
		"partition":                         with(udevDisk("sda1"), func(e *udevEvent) { e.env["DEVTYPE"] = "partition" }),
		"partition of a member disk's name": with(udevDisk("vdb1"), func(e *udevEvent) { e.env["DEVTYPE"] = "partition" }),
		"hidden nvme path":                  with(udevDisk("nvme0c0n1"), func(e *udevEvent) { e.attr["hidden"] = "1" }),
		"hidden disk":                       with(udevDisk("nvme5n1"), func(e *udevEvent) { e.attr["hidden"] = "1" }),
		"path device of our volume": with(udevDisk("nvme4c4n1"), func(e *udevEvent) {
			e.attrs["subsysnqn"] = "nqn.2026-11.io.fabraid:vol:ab010203-0000-0000-0000-000000000000"
			e.attr["uuid"] = "ab010203-0000-0000-0000-000000000000"
		}),
		"SYSTEMD_READY=0": with(udevDisk("sdd"), func(e *udevEvent) { e.env["SYSTEMD_READY"] = "0" }),
		"DM_SUSPENDED=1":  with(udevDisk("sde"), func(e *udevEvent) { e.env["DM_SUSPENDED"] = "1" }),
		"DM_UDEV_DISABLE_OTHER_RULES_FLAG=1": with(udevDisk("sdf"), func(e *udevEvent) {
			e.env["DM_UDEV_DISABLE_OTHER_RULES_FLAG"] = "1"
		}),
		"fabraid.probe=0":   udevDisk("sdg"),
		"fabraid.probe=off": udevDisk("sdh"),
		"remove":            with(udevDisk("sdi"), func(e *udevEvent) { e.action = "remove" }),
		"bind":              with(udevDisk("sdj"), func(e *udevEvent) { e.action = "bind" }),
		"our volume's head": with(udevDisk("nvme4n1"), func(e *udevEvent) {
			e.attrs["subsysnqn"] = "nqn.2026-11.io.fabraid:vol:ab010203-0000-0000-0000-000000000000"
			e.attr["uuid"] = "ab010203-0000-0000-0000-000000000000"
		}),
		"partition of our volume's head": with(udevDisk("nvme4n1p1"), func(e *udevEvent) {
			e.env["DEVTYPE"] = "partition"
			e.attrs["subsysnqn"] = "nqn.2026-11.io.fabraid:vol:ab010203-0000-0000-0000-000000000000"
		}),
	}
	// Every name the inventory never lists (loop0, dm-0, md0, nbd0, ...),
	// as a disk with no flags: the kernel-name line alone skips it.
	for _, p := range drive.NotDrivePrefixes {
		skipped["not a drive: "+p+"*"] = udevDisk(p + "0")
	}
	skipped["md with a name"] = udevDisk("md127")
	for name, ev := range skipped {
		cmdline := map[string]string{}
		if v, ok := strings.CutPrefix(name, "fabraid.probe="); ok {
			cmdline["fabraid.probe"] = v
		}
		out := evalUdevRules(t, rules, ev, cmdline, anyMember)
		if got := probedDevnodes(out); len(got) != 0 {
			t.Errorf("%s (%s): probed %q, want no probe", name, ev.kernel, got)
		}
		if out.env["ID_FS_TYPE"] != "" || out.env["FABRAID_MEMBER"] != "" || len(out.symlinks) > 0 && name != "our volume's head" {
			t.Errorf("%s: got %v %v", name, out.env, out.symlinks)
		}
	}
}

// A member gets the FABRAID_* properties and ID_FS_TYPE=fabraid_member,
// ID_FS_USAGE=raid with the volume UUID, member UUID and name (as blkid
// gives an md member linux_raid_member); a value blkid left from another
// signature does not survive. A non-member keeps what blkid found. The
// probe here is the real udev-probe on a member image.
func TestUdevRulesMemberProperties(t *testing.T) {
	rules := fabraidRules(t)
	noConf := filepath.Join(t.TempDir(), "none.conf")
	realProbe := func(cmd string) (string, bool) {
		f := strings.Fields(cmd)
		if len(f) != 3 || f[0] != "/usr/bin/fabraid" || f[1] != "udev-probe" {
			return "", false
		}
		c := newRootCmd()
		var out strings.Builder
		c.SetOut(&out)
		c.SetErr(&strings.Builder{})
		c.SetArgs([]string{"udev-probe", "--config", noConf, f[2]})
		err := c.Execute()
		return out.String(), err == nil
	}
	member := writeMember(t, probeSample("vol0", "a"), probeSample("vol0", "a"), 1<<20)
	ev := udevDisk("vdb")
	ev.devnode = member
	ev.env["ID_FS_VERSION"] = "1.0" // blkid's, from something else on the disk
	out := evalUdevRules(t, rules, ev, nil, realProbe)
	want := map[string]string{
		"FABRAID_MEMBER":      "1",
		"ID_FS_TYPE":          "fabraid_member",
		"ID_FS_USAGE":         "raid",
		"ID_FS_UUID":          "ab010203-0000-0000-0000-000000000000",
		"ID_FS_UUID_ENC":      "ab010203-0000-0000-0000-000000000000",
		"ID_FS_UUID_SUB":      "09010000-0000-0000-0000-000000000000",
		"ID_FS_UUID_SUB_ENC":  "09010000-0000-0000-0000-000000000000",
		"ID_FS_LABEL":         "vol0",
		"ID_FS_LABEL_ENC":     "vol0",
		"SYSTEMD_WANTS":       "fabraidd.service",
		"FABRAID_VOLUME_NAME": "vol0",
	}
	for k, v := range want {
		if out.env[k] != v {
			t.Errorf("member: %s=%q, want %q", k, out.env[k], v)
		}
	}
	if v, ok := out.env["ID_FS_VERSION"]; ok {
		t.Errorf("member: blkid's ID_FS_VERSION=%q left", v)
	}
	if !slices.Equal(out.symlinks, []string{"disk/by-fabraid/member-09010000-0000-0000-0000-000000000000"}) ||
		!slices.Equal(out.tags, []string{"systemd", "fabraid"}) {
		t.Errorf("member: links %q tags %q", out.symlinks, out.tags)
	}

	// A volume without a name: no label (not an empty one).
	unnamed := probeSample("", "a")
	ev.devnode = writeMember(t, unnamed, unnamed, 1<<20)
	out = evalUdevRules(t, rules, ev, nil, realProbe)
	if _, ok := out.env["ID_FS_LABEL"]; ok || out.env["ID_FS_TYPE"] != "fabraid_member" {
		t.Errorf("unnamed member: %v", out.env)
	}

	// Not a member: blkid's ext4 stays, nothing of ours is added.
	blank := filepath.Join(t.TempDir(), "blank")
	os.WriteFile(blank, make([]byte, 1<<20), 0o600)
	ev = udevDisk("vdc")
	ev.devnode = blank
	ev.env["ID_FS_TYPE"], ev.env["ID_FS_USAGE"] = "ext4", "filesystem"
	out = evalUdevRules(t, rules, ev, nil, realProbe)
	if len(out.programs) != 1 || out.env["ID_FS_TYPE"] != "ext4" || out.env["ID_FS_USAGE"] != "filesystem" ||
		out.env["FABRAID_MEMBER"] != "" || out.env["SYSTEMD_WANTS"] != "" || len(out.symlinks) != 0 {
		t.Errorf("non-member: programs %q env %v links %q", out.programs, out.env, out.symlinks)
	}
}

// udev_probe = false in the configuration: the probe reads nothing and
// reports no member, even when another line of the file is wrong.
func TestUdevProbeConfigOptOut(t *testing.T) {
	member := writeMember(t, probeSample("vol0", "a"), probeSample("vol0", "a"), 1<<20)
	dir := t.TempDir()
	for i, c := range []struct {
		conf   string
		member bool
	}{
		{"udev_probe = false\n", false},
		{"node_name = a\nudev_probe = false\nno_such_key = 1\n", false},
		{"udev_probe = true\n", true},
		{"node_name = a\n", true},
		{"udev_probe = maybe\n", true}, // invalid: fabraidd refuses the file; the probe goes on
	} {
		conf := filepath.Join(dir, "c"+string(rune('0'+i)))
		os.WriteFile(conf, []byte(c.conf), 0o644)
		cmd := newRootCmd()
		var out, errOut strings.Builder
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs([]string{"udev-probe", "--config", conf, member})
		err := cmd.Execute()
		if got := strings.Contains(out.String(), "FABRAID_MEMBER=1"); got != c.member || (err == nil) != c.member {
			t.Errorf("%q: member %v (out %q, err %v), want %v", c.conf, got, out.String(), err, c.member)
		}
		if !c.member {
			if ee, ok := err.(*exitError); !ok || ee.code != 1 || !strings.Contains(err.Error(), "not read") {
				t.Errorf("%q: err %v, want exit 1 saying the device was not read", c.conf, err)
			}
		}
	}
}
