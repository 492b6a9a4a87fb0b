package rpmbuild

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// The package tests build once per test binary: binaries for x86_64 and
// aarch64, the four packages of version 1.0.0 (signed with a throwaway
// key) and an el9 x86_64 1.0.1 for the upgrade test.
type fixture struct {
	dir    string
	opts   Options
	def    *Package
	pkgs   map[string]string // "el9/x86_64" -> .rpm path (1.0.0)
	newer  string            // el9/x86_64 1.0.1, with a changed default fabraid.conf
	pubKey string            // armored public key file
	err    error
}

var (
	fixOnce sync.Once
	fix     fixture
)

// needTools skips (or, under CI, fails) when the rpm tools are missing;
// scripts/setup-host.sh installs them.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed (scripts/setup-host.sh installs it)", tool)
			}
			t.Skipf("%s not installed (scripts/setup-host.sh installs it)", tool)
		}
	}
}

func getFixture(t *testing.T) *fixture {
	t.Helper()
	needTools(t, "rpm", "go")
	fixOnce.Do(func() {
		start := time.Now()
		fix.err = buildFixture(&fix)
		if fix.err == nil {
			t.Logf("fixture: 2 architectures compiled, 5 packages written in %v", time.Since(start).Round(time.Second))
		}
	})
	if fix.err != nil {
		t.Fatal(fix.err)
	}
	return &fix
}

func buildFixture(f *fixture) error {
	ctx := context.Background()
	var err error
	if f.dir, err = os.MkdirTemp("", "fabraid-rpmtest-"); err != nil {
		return err
	}
	root, _ := filepath.Abs("../..")
	v, err := Describe(ctx, root)
	if err != nil {
		return err
	}
	epoch := time.Unix(1796000000, 0).UTC()
	key, pub, err := testKey(f.dir, epoch.Add(-24*time.Hour))
	if err != nil {
		return err
	}
	f.pubKey = pub
	f.opts = Options{Root: root, Out: filepath.Join(f.dir, "v1"), Version: Version{Describe: v.Describe, RPM: "1.0.0"},
		Epoch: epoch, Targets: DefaultTargets(), SigningKey: key}
	st, err := Prepare(ctx, f.opts)
	if err != nil {
		return err
	}
	defer st.Close()
	f.def = st.Def // (1.0.0's file list; 1.0.1 only changes a file's source)
	built, err := st.Package(f.opts)
	if err != nil {
		return err
	}
	f.pkgs = map[string]string{}
	for _, b := range built {
		f.pkgs[b.Target.Dist+"/"+b.Target.RPMArch()] = b.Path
	}
	// 1.0.1 ships a changed default configuration.
	conf, err := os.ReadFile(filepath.Join(root, "packaging/fabraid.conf"))
	if err != nil {
		return err
	}
	newConf := filepath.Join(f.dir, "fabraid.conf.1.0.1")
	if err := os.WriteFile(newConf, append(conf, "# a new default in 1.0.1\n"...), 0o644); err != nil {
		return err
	}
	for i := range st.Def.Files {
		if st.Def.Files[i].Kind == Config {
			st.Def.Files[i].Src = newConf
		}
	}
	o2 := f.opts
	o2.Out, o2.Version.RPM, o2.Targets = filepath.Join(f.dir, "v2"), "1.0.1", []Target{{"el9", "amd64"}}
	built, err = st.Package(o2)
	if err != nil {
		return err
	}
	f.newer = built[0].Path
	return nil
}

// testKey writes a throwaway RSA signing key, created at created, and its
// public key. (A signature dated before its key's creation is invalid.)
func testKey(dir string, created time.Time) (priv, pub string, err error) {
	e, err := openpgp.NewEntity("fabraid test", "", "test@fabraid.invalid",
		&packet.Config{RSABits: 2048, Time: func() time.Time { return created }})
	if err != nil {
		return "", "", err
	}
	write := func(name, typ string, ser func(*bytes.Buffer) error) (string, error) {
		var raw, out bytes.Buffer
		if err := ser(&raw); err != nil {
			return "", err
		}
		w, err := armor.Encode(&out, typ, nil)
		if err != nil {
			return "", err
		}
		w.Write(raw.Bytes())
		w.Close()
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, out.Bytes(), 0o600)
	}
	if priv, err = write("key.asc", openpgp.PrivateKeyType, func(b *bytes.Buffer) error { return e.SerializePrivate(b, nil) }); err != nil {
		return "", "", err
	}
	pub, err = write("key.pub", openpgp.PublicKeyType, func(b *bytes.Buffer) error { return e.Serialize(b) })
	return priv, pub, err
}

// run returns the standard output of a command that must succeed (rpm
// warns on stderr about the test key it does not know).
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// relativePayload fails unless every name in pkg's cpio payload is
// relative ("./usr/bin/fabraid"). rpmlint unpacks packages with
// "rpm2cpio | cpio -id": absolute names (as nfpm 2.45.2's rpmpack writes
// them) land in the host's / instead of rpmlint's scratch directory.
func relativePayload(t *testing.T, pkg string) {
	t.Helper()
	names := run(t, "sh", "-c", `rpm2cpio "$1" | cpio -t --quiet`, "sh", pkg)
	for _, n := range lines(names) {
		if !strings.HasPrefix(n, "./") {
			t.Fatalf("%s: payload name %q is not relative: unpacking it (rpmlint does) would write into /", pkg, n)
		}
	}
}

// TestRpmlint: no error in any of the four packages nor in the .spec (the deliberate ones
// are filtered in packaging/rpm/rpmlint.toml, see docs/install.md).
func TestRpmlint(t *testing.T) {
	f := getFixture(t)
	needTools(t, "rpmlint", "rpmkeys")
	args := []string{"-c", filepath.Join(f.opts.Root, "packaging/rpm/rpmlint.toml")}
	for _, p := range f.pkgs {
		args = append(args, p)
	}
	sort.Strings(args[2:])
	for _, p := range args[2:] {
		relativePayload(t, p)
	}
	args = append(args, filepath.Join(f.opts.Root, SpecPath))
	// rpmlint checks the signature with "rpm -Kv": give rpm a database
	// that knows the test key, as a node that imported it does.
	home := t.TempDir()
	db := filepath.Join(home, "rpmdb")
	run(t, "rpm", "--dbpath", db, "--initdb")
	run(t, "rpmkeys", "--dbpath", db, "--import", f.pubKey)
	if err := os.WriteFile(filepath.Join(home, ".rpmmacros"), []byte("%_dbpath "+db+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("rpmlint", args...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.CombinedOutput()
	t.Logf("rpmlint:\n%s", out)
	if err != nil || !regexp.MustCompile(`checked; 0 errors`).Match(out) {
		t.Fatalf("rpmlint: %v", err)
	}
}

// TestQueries: files, modes, owners, config flags, scriptlets and
// dependencies as rpm reports them.
func TestQueries(t *testing.T) {
	f := getFixture(t)
	for name, pkg := range f.pkgs {
		t.Run(strings.ReplaceAll(name, "/", "-"), func(t *testing.T) {
			// -qplv: every defined path, nothing else, root-owned, with its mode.
			want := map[string]string{}
			for _, fl := range f.def.Files {
				perm := "-" + os.FileMode(fl.Mode).String()[1:]
				switch fl.Kind {
				case Dir:
					perm = "d" + perm[1:]
				case Symlink:
					perm = "l" // the permission bits of a link mean nothing
				}
				want[fl.Dst] = perm
			}
			got := map[string]bool{}
			for _, l := range lines(run(t, "rpm", "-qplv", pkg)) {
				l, _, _ = strings.Cut(l, " -> ") // a symlink's target
				fs := strings.Fields(l)
				if len(fs) < 9 {
					t.Fatalf("-qplv line %q", l)
				}
				p := fs[len(fs)-1]
				got[p] = true
				if w, ok := want[p]; !ok {
					t.Errorf("unexpected %s", p)
				} else if (fs[0] != w && !(w == "l" && fs[0][0] == 'l')) || fs[2] != "root" || fs[3] != "root" {
					t.Errorf("%s: %s %s:%s, want %s root:root", p, fs[0], fs[2], fs[3], w)
				}
			}
			for p := range want {
				if !got[p] {
					t.Errorf("missing %s", p)
				}
			}
			for _, p := range []string{"/usr/bin/fabraid", "/usr/sbin/fabraidd", "/usr/lib/systemd/system/fabraidd.service",
				"/usr/lib/systemd/system/fabraid-engine@.service", "/usr/lib/systemd/system-preset/50-fabraid.preset",
				"/usr/lib/modules-load.d/fabraid.conf", "/usr/lib/tmpfiles.d/fabraid.conf", "/usr/share/man/man1/fabraid.1.gz",
				"/usr/share/man/man8/fabraidd.8.gz", "/usr/share/man/man5/fabraid.conf.5.gz", "/usr/share/bash-completion/completions/fabraid", "/usr/share/fabraid/scale",
				"/usr/share/fabraid/scale/nsddevices", "/usr/libexec/fabraid/fabraid-scale-prestartup",
				"/usr/libexec/fabraid/plugins", "/usr/libexec/fabraid/plugins/fabraid-plugin-nvmet", "/usr/libexec/fabraid/plugins/fabraid-plugin-spdk"} {
				if !got[p] {
					t.Errorf("package lacks %s", p)
				}
			}
			if want["/etc/fabraid/fabraid.conf"] != "-rw-r-----" || want["/var/lib/fabraid"] != "drwx------" {
				t.Errorf("definition: conf %s, state dir %s", want["/etc/fabraid/fabraid.conf"], want["/var/lib/fabraid"])
			}
			// -qpc and the flags: fabraid.conf is the only config file, noreplace.
			if c := strings.TrimSpace(run(t, "rpm", "-qpc", pkg)); c != "/etc/fabraid/fabraid.conf" {
				t.Errorf("-qpc: %q", c)
			}
			flags := run(t, "rpm", "-qp", "--qf", `[%{FILEFLAGS:fflags} %{FILENAMES}\n]`, pkg)
			if !regexp.MustCompile(`(?m)^cn /etc/fabraid/fabraid\.conf$`).MatchString(flags) {
				t.Errorf("fabraid.conf is not %%config(noreplace):\n%s", flags)
			}
			if !regexp.MustCompile(`(?m)^d /usr/share/man/man1/fabraid\.1\.gz$`).MatchString(flags) {
				t.Errorf("man pages not %%doc")
			}
			// --scripts: the macro expansions, engines never restarted.
			s := run(t, "rpm", "-qp", "--scripts", pkg)
			for _, want := range []string{SystemdPost([]string{"fabraidd.service"}), SystemdPreun([]string{"fabraidd.service"}),
				SystemdPostunWithRestart([]string{"fabraidd.service"})} {
				if !strings.Contains(s, want) {
					t.Errorf("--scripts lacks\n%s\nin\n%s", want, s)
				}
			}
			if strings.Contains(s, "fabraid-engine@.service") {
				t.Errorf("a scriptlet acts on the engine template:\n%s", s)
			}
			// --requires (with the scriptlet qualifiers), --recommends, --provides.
			req := strings.Join(lines(run(t, "rpm", "-qp", "--requires", pkg)), " ")
			if !strings.Contains(req, "kmod") || !strings.Contains(req, "systemd") || strings.Contains(req, "nvme-cli") {
				t.Errorf("--requires: %s", req)
			}
			qual := run(t, "rpm", "-qp", "--qf", `[%{REQUIRENAME} %{REQUIREFLAGS:deptype}\n]`, pkg)
			for _, w := range []string{"systemd manual", "systemd post", "systemd preun", "systemd postun", "kmod manual"} {
				if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(qual) {
					t.Errorf("no Requires %q (Requires(post/preun/postun) as %%{?systemd_requires} gives them):\n%s", w, qual)
				}
			}
			prov := run(t, "rpm", "-qp", "--provides", pkg)
			if len(f.def.Provides) == 0 {
				t.Error("the definition provides no bundled Go module")
			}
			for _, p := range f.def.Provides {
				if !strings.Contains(prov, p+"\n") {
					t.Errorf("--provides lacks %s", p)
				}
			}
			// %license: the project's LICENSE and every module's.
			if !regexp.MustCompile(`(?m)^l /usr/share/licenses/fabraid/LICENSE$`).MatchString(flags) ||
				!regexp.MustCompile(`(?m)^l /usr/share/licenses/fabraid/modules/go\.etcd\.io/etcd/api/v3/LICENSE$`).MatchString(flags) {
				t.Errorf("license files not %%license:\n%s", flags)
			}
			if rec := strings.Join(lines(run(t, "rpm", "-qp", "--recommends", pkg)), " "); rec != "bash-completion nvme-cli" {
				t.Errorf("--recommends: %s", rec)
			}
			if a := run(t, "rpm", "-qp", "--qf", "%{ARCH} %{RELEASE}", pkg); a != path.Base(name)+" 1."+path.Dir(name) {
				t.Errorf("arch/release %q for %s", a, name)
			}
		})
	}
}

// scratchRoot returns an empty rpm root with a database.
func scratchRoot(t *testing.T) string {
	root := t.TempDir()
	run(t, "rpm", "--root", root, "--initdb")
	return root
}

func elfMachine(t *testing.T, file string) elf.Machine {
	e, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return e.Machine
}

// TestArchitectures: each package holds binaries of its architecture.
func TestArchitectures(t *testing.T) {
	f := getFixture(t)
	for name, pkg := range f.pkgs {
		root := scratchRoot(t)
		run(t, "rpm", "--root", root, "-i", "--nodeps", "--noscripts", "--ignorearch", pkg)
		want := elf.EM_X86_64
		if strings.HasSuffix(name, "aarch64") {
			want = elf.EM_AARCH64
		}
		for _, b := range []string{"usr/bin/fabraid", "usr/sbin/fabraidd", "usr/libexec/fabraid/plugins/fabraid-plugin-nvmet", "usr/libexec/fabraid/plugins/fabraid-plugin-spdk"} {
			if m := elfMachine(t, filepath.Join(root, b)); m != want {
				t.Errorf("%s: %s is %v, want %v", name, b, m, want)
			}
		}
	}
}

// TestSignature: packages built with a key verify with its public key.
func TestSignature(t *testing.T) {
	f := getFixture(t)
	needTools(t, "rpmkeys")
	root := scratchRoot(t)
	run(t, "rpmkeys", "--root", root, "--import", f.pubKey)
	for _, pkg := range f.pkgs {
		if out := run(t, "rpmkeys", "--root", root, "-K", pkg); !strings.Contains(out, "digests signatures OK") {
			t.Errorf("rpmkeys -K: %s", out)
		}
	}
}

// TestReproducible: a second build from scratch (new compile, new
// staging directory) gives the same bytes.
func TestReproducible(t *testing.T) {
	f := getFixture(t)
	o := f.opts
	o.Out, o.Targets = t.TempDir(), []Target{{"el9", "arm64"}}
	built, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(f.pkgs["el9/aarch64"])
	b, _ := os.ReadFile(built[0].Path)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("two builds differ: %s (%d bytes) and %s (%d bytes)", f.pkgs["el9/aarch64"], len(a), built[0].Path, len(b))
	}
}

// TestRepository: createrepo_c makes a repository of the packages, as
// docs/install.md sets one up, and its metadata names each of them.
func TestRepository(t *testing.T) {
	f := getFixture(t)
	needTools(t, "createrepo_c")
	repo := t.TempDir()
	for name, p := range f.pkgs {
		if !strings.HasPrefix(name, "el9/") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, filepath.Base(p)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "createrepo_c", "--quiet", "--update", repo)
	repomd, err := os.ReadFile(filepath.Join(repo, "repodata", "repomd.xml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`href="(repodata/[^"]*-primary\.xml\.(gz|zst|xz|bz2))"`).FindSubmatch(repomd)
	if m == nil {
		t.Fatalf("repomd.xml names no primary metadata:\n%s", repomd)
	}
	primary := run(t, "sh", "-c", `case "$1" in *.gz) zcat "$1";; *.zst) zstdcat "$1";; *.xz) xzcat "$1";; *) bzcat "$1";; esac`, "sh",
		filepath.Join(repo, string(m[1])))
	for _, want := range []string{`packages="2"`, `<arch>x86_64</arch>`, `<arch>aarch64</arch>`,
		`<version epoch="0" ver="1.0.0" rel="1.el9"/>`, `<rpm:entry name="nvme-cli"/>`} {
		if !strings.Contains(primary, want) {
			t.Errorf("primary metadata lacks %s", want)
		}
	}
}
