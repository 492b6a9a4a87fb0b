package rpmbuild

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"go.digitalxero.dev/rpm"
)

// Target is one package to build: a distribution release and an
// architecture.
type Target struct {
	Dist   string // "el9", "el10": the release suffix (%{?dist} without the dot)
	GOARCH string // "amd64", "arm64"
}

// RPMArch is the architecture name RPM uses.
func (t Target) RPMArch() string {
	if t.GOARCH == "arm64" {
		return "aarch64"
	}
	return "x86_64"
}

// DefaultTargets are the packages "make rpm" builds. el9 and el10 carry
// the same static binaries (GOAMD64=v1 runs on both); they differ in their
// release tag, so that each release has its own repository.
func DefaultTargets() []Target {
	var ts []Target
	for _, d := range []string{"el9", "el10"} {
		for _, a := range []string{"amd64", "arm64"} {
			ts = append(ts, Target{Dist: d, GOARCH: a})
		}
	}
	return ts
}

// Options configure a build.
type Options struct {
	Root       string    // checkout to build from
	Out        string    // output directory for the .rpm files
	Version    Version   // package version (see Describe)
	Release    string    // release number before the dist tag; default "1"
	Epoch      time.Time // file and build times (SOURCE_DATE_EPOCH)
	Targets    []Target
	SigningKey string // optional: armored OpenPGP private key file
	Passphrase string // its passphrase, if any
	Log        io.Writer
}

// Built is one package written.
type Built struct {
	Target Target
	Path   string
}

// Build compiles the binaries for each architecture of opts.Targets, writes
// the man pages and completion, and writes one RPM per target into Out.
func Build(ctx context.Context, opts Options) ([]Built, error) {
	st, err := Prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Package(opts)
}

// Stage holds what the packages are made of: the compiled binaries, the
// generated files and the definition. Several versions can be packaged
// from one Stage.
type Stage struct {
	work string
	bins map[string]string // GOARCH -> directory with fabraid, fabraidd
	gen  string
	Def  *Package
}

// Prepare compiles the binaries of every architecture in opts.Targets
// (stamped with opts.Version.Describe) and generates the man pages and
// completion with the host's binaries.
func Prepare(ctx context.Context, opts Options) (_ *Stage, err error) {
	work, err := os.MkdirTemp("", "fabraid-rpm-")
	if err != nil {
		return nil, err
	}
	st := &Stage{work: work, bins: map[string]string{}, gen: filepath.Join(work, "gen")}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	arches := []string{runtime.GOARCH} // the host's, to run them
	for _, t := range opts.Targets {
		arches = append(arches, t.GOARCH)
	}
	for _, a := range arches {
		if st.bins[a] != "" {
			continue
		}
		dir := filepath.Join(work, "bin-"+a)
		if err := CompileBinaries(ctx, opts.Root, a, opts.Version.Describe, dir); err != nil {
			return nil, err
		}
		st.bins[a] = dir
	}
	pages, err := Generate(ctx, st.bins[runtime.GOARCH], opts.Epoch, st.gen)
	if err != nil {
		return nil, err
	}
	if st.Def, err = Layout(opts.Root, pages); err != nil {
		return nil, err
	}
	// The license files of what the binaries link, from the module cache
	// the compile used.
	mods, err := LinkedModules(ctx, opts.Root)
	if err != nil {
		return nil, err
	}
	lic, err := ModuleLicenses(mods)
	if err != nil {
		return nil, err
	}
	st.Def.Files = append(st.Def.Files, lic...)
	sort.Slice(st.Def.Files, func(i, j int) bool { return st.Def.Files[i].Dst < st.Def.Files[j].Dst })
	return st, nil
}

// Close removes the stage's files.
func (st *Stage) Close() error { return os.RemoveAll(st.work) }

// Package writes one RPM per target of opts into opts.Out, with
// opts.Version.RPM as the package version.
func (st *Stage) Package(opts Options) ([]Built, error) {
	if opts.Release == "" {
		opts.Release = "1"
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	var out []Built
	for _, t := range opts.Targets {
		bin := st.bins[t.GOARCH]
		if bin == "" {
			return nil, fmt.Errorf("rpm %s/%s: no binaries prepared for %s", t.Dist, t.RPMArch(), t.GOARCH)
		}
		path, err := WriteRPM(st.Def, opts, t, bin, st.gen, st.work)
		if err != nil {
			return nil, err
		}
		if opts.Log != nil {
			fmt.Fprintln(opts.Log, "wrote", path)
		}
		out = append(out, Built{Target: t, Path: path})
	}
	return out, nil
}

// CompileBinaries builds fabraid, fabraidd and the plugins for
// linux/goarch into dir: static (CGO_ENABLED=0), -trimpath, stripped,
// version stamped.
func CompileBinaries(ctx context.Context, root, goarch, version, dir string) error {
	args := append([]string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=" + version, "-o", dir + "/"}, shippedCommands()...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOAMD64=v1", "GOARM64=v8.0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build (%s): %w\n%s", goarch, err, out)
	}
	return nil
}

// Generate runs the host binaries in bin to write the man pages (gzip,
// reproducible) and the bash completion into dir; it returns the man page
// names.
func Generate(ctx context.Context, bin string, epoch time.Time, dir string) ([]string, error) {
	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10))
	run := func(stdout io.Writer, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.Env, cmd.Stdout = env, stdout
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
		}
		return nil
	}
	raw := filepath.Join(dir, "man-raw")
	if err := run(io.Discard, "fabraid", "man", raw); err != nil {
		return nil, err
	}
	if err := run(io.Discard, "fabraidd", "man", raw); err != nil {
		return nil, err
	}
	var comp bytes.Buffer
	if err := run(&comp, "fabraid", "completion", "bash"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, GenCompletion), comp.Bytes(), 0o644); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(raw)
	if err != nil {
		return nil, err
	}
	var pages []string
	for _, e := range ents {
		body, err := os.ReadFile(filepath.Join(raw, e.Name()))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()+".gz"), gzipBytes(body), 0o644); err != nil {
			return nil, err
		}
		pages = append(pages, e.Name())
	}
	sort.Strings(pages)
	return pages, nil
}

// gzipBytes compresses b with no name and no time in the header.
func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// WriteRPM writes the RPM of target t: binaries from bin, generated files
// from gen. It uses the RPM writer nfpm v2.48 is built on directly (nfpm
// itself cannot mark a dependency Requires(preun) or Requires(postun)).
func WriteRPM(p *Package, opts Options, t Target, bin, gen, _ string) (string, error) {
	release := opts.Release + "." + t.Dist
	b := rpm.NewPackage().
		WithName(p.Name).WithVersion(opts.Version.RPM).WithRelease(release).
		WithSummary(p.Summary).WithDescription(p.Description).
		WithArch(t.RPMArch()).WithOS("linux").
		WithLicense(p.License).WithURL(p.URL).WithVendor(p.Vendor).
		WithGroup("System Environment/Daemons").WithPackager(maintainer).
		WithBuildHost("fabraid-build").WithBuildTime(opts.Epoch).
		WithCompressor(rpm.GzipCompressor(gzip.DefaultCompression))
	for _, r := range p.Requires {
		b.Requires().AddParsed(r)
	}
	for _, r := range p.ScriptRequires {
		b.Requires().With(r, "", rpm.SenseScriptPost).With(r, "", rpm.SenseScriptPreUn).With(r, "", rpm.SenseScriptPostUn)
	}
	for _, r := range p.Recommends {
		b.Recommends().AddParsed(r)
	}
	for _, r := range p.Provides {
		b.Provides().AddParsed(r)
	}
	s := MakeScripts(p)
	for _, sc := range []struct {
		body string
		set  func() rpm.ScriptletBuilder
	}{{s.Post, b.Postin}, {s.Preun, b.Preun}, {s.Postun, b.Postun}, {s.Posttrans, b.Posttrans}} {
		if sc.body != "" {
			sc.set().WithScript(sc.body).Done()
		}
	}
	b.Changelog().Add(opts.Epoch, maintainer+" - "+opts.Version.RPM+"-"+release, "- Build of "+opts.Version.Describe).Done()
	if err := addFiles(b, p, opts.Root, bin, gen, uint32(opts.Epoch.Unix())); err != nil {
		return "", err
	}
	if opts.SigningKey != "" {
		sign, err := signer(opts.SigningKey, opts.Passphrase, opts.Epoch)
		if err != nil {
			return "", err
		}
		b.WithPGPSignFunc(func(data []byte) ([]byte, error) { return sign(bytes.NewReader(data)) })
	}
	pkg, err := b.Build()
	if err != nil {
		return "", fmt.Errorf("rpm %s/%s: %w", t.Dist, t.RPMArch(), err)
	}
	name := filepath.Join(opts.Out, fmt.Sprintf("%s-%s-%s.%s.rpm", p.Name, opts.Version.RPM, release, t.RPMArch()))
	f, err := os.Create(name)
	if err != nil {
		return "", err
	}
	if _, err := pkg.WriteTo(f); err != nil {
		f.Close()
		os.Remove(name)
		return "", fmt.Errorf("rpm %s/%s: %w", t.Dist, t.RPMArch(), err)
	}
	return name, f.Close()
}

// fileTypes are the RPM file flags of each Kind.
var fileTypes = map[Kind]rpm.FileType{Config: rpm.ConfigFile | rpm.NoReplaceFile, Doc: rpm.DocFile, License: rpm.LicenceFile}

// addFiles adds the files of the definition, root:root with mtime:
// sources from the checkout at root, binaries from bin, generated files
// from gen.
func addFiles(b rpm.PackageBuilder, p *Package, root, bin, gen string, mtime uint32) error {
	for _, f := range p.Files {
		fb := b.File(f.Dst).WithOwner("root").WithGroup("root").WithMTime(mtime)
		switch f.Kind {
		case Dir:
			fb.Directory().WithMode(uint(f.Mode)).Add()
			continue
		case Symlink:
			fb.WithSymlink(f.Src).WithMode(0)
			if strings.HasPrefix(f.Dst, LicenseDir+"/") { // a module license linked to an identical one
				fb.WithType(rpm.LicenceFile)
			}
			fb.Add()
			continue
		}
		src := f.Src
		switch {
		case isBinary(f.Gen):
			src = filepath.Join(bin, f.Gen)
			fb.WithColor(rpm.FileColorELF64) // every target is a 64-bit ELF
		case strings.HasPrefix(f.Gen, GenMan):
			src = filepath.Join(gen, strings.TrimPrefix(f.Gen, GenMan)+".gz")
		case f.Gen != "":
			src = filepath.Join(gen, f.Gen)
		case !filepath.IsAbs(src):
			src = filepath.Join(root, src)
		}
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("rpm: %s: %w", f.Dst, err)
		}
		if ft, ok := fileTypes[f.Kind]; ok {
			fb.WithType(ft)
		}
		fb.FromPath(src).WithMode(uint(f.Mode)).Add()
	}
	return nil
}

// signer returns an RPM header signer with the armored private key in
// keyFile. The signature time is epoch, so that signed builds are
// reproducible too (RSA PKCS#1 v1.5 and Ed25519 signatures are
// deterministic).
func signer(keyFile, passphrase string, epoch time.Time) (func(io.Reader) ([]byte, error), error) {
	f, err := os.Open(keyFile)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	defer f.Close()
	keys, err := openpgp.ReadArmoredKeyRing(f)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", keyFile, err)
	}
	if len(keys) != 1 || keys[0].PrivateKey == nil {
		return nil, fmt.Errorf("signing key %s: want exactly one private key", keyFile)
	}
	key := keys[0]
	if key.PrivateKey.Encrypted {
		if err := key.PrivateKey.Decrypt([]byte(passphrase)); err != nil {
			return nil, fmt.Errorf("signing key %s: %w", keyFile, err)
		}
	}
	random := false // no random salt notation: the same bytes every build
	cfg := &packet.Config{DefaultHash: crypto.SHA256, Time: func() time.Time { return epoch },
		NonDeterministicSignaturesViaNotation: &random}
	return func(r io.Reader) ([]byte, error) {
		var sig bytes.Buffer
		if err := openpgp.DetachSign(&sig, key, r, cfg); err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		return sig.Bytes(), nil
	}, nil
}

// ParseTargets parses "el9/x86_64,el10/aarch64" (arch as RPM or Go names it).
func ParseTargets(s string) ([]Target, error) {
	var ts []Target
	for _, f := range strings.Split(s, ",") {
		d, a, ok := strings.Cut(strings.TrimSpace(f), "/")
		switch a {
		case "x86_64":
			a = "amd64"
		case "aarch64":
			a = "arm64"
		}
		if !ok || (d != "el9" && d != "el10") || (a != "amd64" && a != "arm64") {
			return nil, fmt.Errorf("target %q: want el9|el10 / x86_64|aarch64", f)
		}
		ts = append(ts, Target{Dist: d, GOARCH: a})
	}
	return ts, nil
}

const maintainer = "fabraid developers"
