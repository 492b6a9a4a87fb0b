// Package rpmbuild builds fabraid's RPM packages (el9, el10 × x86_64,
// aarch64) in Go (go.digitalxero.dev/rpm, the writer nfpm is built on), and
// writes the equivalent .spec file for sites that rebuild with rpmbuild or
// mock. Both declare Requires(post/preun/postun) systemd, the bundled Go
// modules (BundledPath) and ship their licenses.
//
// The file list is data: Layout walks packaging/ and docs/ of a checkout and
// maps every file to the path the RPM macros name (see the table in
// docs/install.md), so a new unit, udev rule or Storage Scale file is
// packaged by adding it to its directory. Files it does not know how to
// place are an error, not silently left out.
//
// Scriptlets are the expansions of systemd's %systemd_post, %systemd_preun
// and %systemd_postun_with_restart written out (the RPM writer does not
// expand macros; the .spec uses the macros themselves). Engine instances
// (fabraid-engine@<volume>.service) are never restarted by an upgrade: a
// restart is a ublk recovery, a pause for every consumer of the volume.
//
// Builds are reproducible: file times, the build time and the man page dates
// come from SOURCE_DATE_EPOCH (default: the commit time), contents are
// sorted, and the build host is a constant. A signature (when a key is
// given) makes the bytes depend on the signing time.
package rpmbuild
