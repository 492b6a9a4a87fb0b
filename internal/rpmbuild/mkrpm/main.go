// Command mkrpm builds fabraid's RPM packages into dist/ ("make rpm") and
// writes the .spec file ("make rpm-spec"). See docs/install.md.
//
//	mkrpm [-root .] [-out dist] [-targets el9/x86_64,...] [-version V]
//	mkrpm -spec packaging/rpm/fabraid.spec    (and packaging/rpm/bundled-go-modules.txt)
//
// Environment: SOURCE_DATE_EPOCH (default: the last commit's time);
// FABRAID_RPM_SIGNING_KEY (an armored OpenPGP private key file: sign the
// packages) and FABRAID_RPM_SIGNING_PASSPHRASE.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/fabraid/fabraid/internal/rpmbuild"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkrpm:", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", ".", "checkout to package")
	out := flag.String("out", "dist", "output directory")
	targets := flag.String("targets", "", "comma-separated DIST/ARCH (default: el9 and el10, x86_64 and aarch64)")
	version := flag.String("version", "", "RPM version (default: from git describe)")
	spec := flag.String("spec", "", "write the .spec file to this path instead of building")
	flag.Parse()
	ctx := context.Background()
	if *spec != "" {
		// The .spec's Provides come from the list of linked modules.
		if err := rpmbuild.WriteBundledFile(ctx, *root); err != nil {
			return err
		}
		return rpmbuild.WriteSpecFile(*root, *spec)
	}
	v, err := rpmbuild.Describe(ctx, *root)
	if err != nil {
		return err
	}
	if *version != "" {
		v.RPM = *version
	}
	epoch, err := rpmbuild.SourceDateEpoch(ctx, *root, os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	ts := rpmbuild.DefaultTargets()
	if *targets != "" {
		if ts, err = rpmbuild.ParseTargets(*targets); err != nil {
			return err
		}
	}
	_, err = rpmbuild.Build(ctx, rpmbuild.Options{
		Root: *root, Out: *out, Version: v, Epoch: epoch, Targets: ts,
		SigningKey: os.Getenv("FABRAID_RPM_SIGNING_KEY"),
		Passphrase: os.Getenv("FABRAID_RPM_SIGNING_PASSPHRASE"),
		Log:        os.Stdout,
	})
	return err
}
