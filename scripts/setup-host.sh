#!/usr/bin/env bash
# Installs what fabraid's build, tests and demo need on a Debian/Ubuntu host,
# as root, idempotently: qemu (TCG guests), static busybox (guest userland,
# and /bin/sh of the RPM scriptlet tests' chroot), rpm, rpmlint and
# createrepo-c (the RPM package tests)
# and fresh apt lists so the guest kernels (linux-image-6.12.*, 6.1.0-*) and
# the packages of systemd guests (systemd, dbus and their libraries) can be
# fetched with apt-get download and unpacked with dpkg-deb by the test
# harness; debian-archive-keyring, which verifies the private sid lists
# that the harness downloads itself (under .cache/vmtest/apt-sid) for the
# 7.x guest kernel. Go must already be installed (the Go toolchain is the
# only prerequisite).
set -euo pipefail

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
# busybox-static replaces the dynamic busybox package; the guests need the static one.
if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed'; then
	need+=(busybox-static)
fi

# RPM package tests (internal/rpmbuild): rpm (rpm, rpmspec, rpmkeys), rpmlint,
# createrepo_c.
command -v rpmspec >/dev/null || need+=(rpm)
command -v rpmlint >/dev/null || need+=(rpmlint)
command -v createrepo_c >/dev/null || need+=(createrepo-c)

# dpkg-deb unpacks the systemd guests' packages (part of dpkg, so always there on Debian).
command -v dpkg-deb >/dev/null || need+=(dpkg)

# The 7.x guest kernel comes from Debian sid through a private apt
# configuration (internal/vmtest/sidapt.go: the host's sources stay as they
# are); its lists are verified with the Debian archive keyring.
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)

lists_fresh() {
	local a b s
	a=$(apt-cache pkgnames linux-image-6.12 2>/dev/null || true)
	b=$(apt-cache pkgnames linux-image-6.1.0 2>/dev/null || true)
	# systemd guests: apt must be able to download systemd and dbus (a
	# candidate version, i.e. a package list that names them).
	s=$(apt-cache show --no-all-versions systemd dbus 2>/dev/null | grep -c '^Filename:' || true)
	[[ $a == *deb12-amd64-unsigned* && $b == *amd64-unsigned* && $s == 2 ]]
}

if [ ${#need[@]} -gt 0 ] || ! lists_fresh; then
	if [ "$(id -u)" != 0 ]; then
		echo "setup-host: need root to install: ${need[*]:-fresh apt lists}" >&2
		exit 1
	fi
	echo "setup-host: apt-get update"
	apt-get update -qq
fi
if [ ${#need[@]} -gt 0 ]; then
	echo "setup-host: installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "setup-host: Go is not on PATH (need Go 1.26: /usr/local/go/bin)" >&2; exit 1; }
echo "setup-host: ok ($(qemu-system-x86_64 --version | head -1); $(go version))"
