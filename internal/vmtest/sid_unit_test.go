package vmtest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The 7.x series picks the newest generic linux-image-7.* meta-package by
// version (7.10 > 7.9), never a cloud, rt or -dbg one.
func TestNewestPackageKernel7(t *testing.T) {
	names := []string{
		"linux-image-7.2.13+deb14-amd64",
		"linux-image-7.2.13+deb14-amd64-dbg",
		"linux-image-7.2.13+deb14-cloud-amd64",
		"linux-image-7.2.9+deb14-amd64",
		"linux-image-7.10.1+deb14-rt-amd64",
		"linux-image-7.1.4+deb14-amd64",
		"linux-image-6.12.117+deb12-amd64-unsigned",
	}
	got, err := newestPackage(Kernel7, names)
	if want := "linux-image-7.2.13+deb14-amd64"; err != nil || got != want {
		t.Errorf("newestPackage(%s) = %q, %v; want %q", Kernel7, got, err, want)
	}
	got, err = newestPackage(Kernel7, append(names, "linux-image-7.10.0+deb14-amd64"))
	if want := "linux-image-7.10.0+deb14-amd64"; err != nil || got != want {
		t.Errorf("newestPackage(%s) with 7.10 = %q, %v; want %q", Kernel7, got, err, want)
	}
}

func TestSplitKernelPackages(t *testing.T) {
	const img = "linux-image-7.2.13+deb14-amd64"
	base := []string{"linux-base-7.2.13+deb14-amd64", "linux-modules-7.2.13+deb14-amd64"}
	for _, tc := range []struct {
		known []string
		want  []string
		err   string
	}{
		{append(base, "linux-binary-7.2.13+deb14-amd64", "linux-binary-unsigned-7.2.13+deb14-amd64"),
			append(base, "linux-binary-7.2.13+deb14-amd64"), ""},
		// The signed image can lag behind in sid: take the unsigned one.
		{append(base, "linux-binary-unsigned-7.2.13+deb14-amd64"),
			append(base, "linux-binary-unsigned-7.2.13+deb14-amd64"), ""},
		{base, nil, "linux-binary"},
		{[]string{"linux-base-7.2.13+deb14-amd64", "linux-binary-7.2.13+deb14-amd64"}, nil, "linux-modules-7.2.13+deb14-amd64"},
	} {
		got, err := splitKernelPackages(img, tc.known)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("known %v: error %v, want one naming %s", tc.known, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("known %v: %v, %v; want %v", tc.known, got, err, tc.want)
		}
	}
}

// The Debian mirror is read from the host's apt sources: deb822 and
// one-line, skipping security, updates, deb-src and disabled stanzas.
func TestDebianMirror(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	deb822 := write("a.sources", `Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
URIs: http://off.example/debian
Suites: bookworm
Enabled: no

Types: deb
# a comment
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`)
	if got, err := debianMirror([]string{deb822}); err != nil || got != "http://mirror.example/debian" {
		t.Errorf("deb822: %q, %v", got, err)
	}
	oneLine := write("b.list", `# comment
deb http://security.example/debian-security bookworm-security main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://line.example/debian bookworm main
`)
	if got, err := debianMirror([]string{oneLine}); err != nil || got != "http://line.example/debian" {
		t.Errorf("one-line: %q, %v", got, err)
	}
	none := write("c.list", "deb http://security.example/debian-security bookworm-security main\n")
	if _, err := debianMirror([]string{none, filepath.Join(dir, "*.missing")}); err == nil {
		t.Error("no release suite: no error")
	}
}

// A 7.x kernel extracted from its split packages loads from
// usr/lib/modules/REL: image, config and modules.builtin (virtio_pci is
// built in there and must not be looked for as a module file).
func TestLoadSplitKernel(t *testing.T) {
	dir := t.TempDir()
	const rel = "7.2.13+deb14-amd64"
	mod := filepath.Join(dir, "usr", "lib", "modules", rel)
	for p, text := range map[string]string{
		"vmlinuz.unsigned":                    "bzImage",
		"config":                              "CONFIG_BLK_DEV_UBLK=m\nCONFIG_VIRTIO_PCI=y\n# CONFIG_FOO is not set\n",
		"modules.builtin":                     "kernel/drivers/virtio/virtio_pci.ko\nkernel/drivers/virtio/virtio_pci_modern_dev.ko\n",
		"kernel/drivers/block/ublk_drv.ko.xz": "",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(mod, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, err := loadKernel(Kernel7, "linux-image-"+rel, dir)
	if err != nil {
		t.Fatal(err)
	}
	if k.Release != rel || k.ModDir != mod || k.Vmlinuz != filepath.Join(mod, "vmlinuz.unsigned") {
		t.Errorf("release %q, moddir %q, vmlinuz %q", k.Release, k.ModDir, k.Vmlinuz)
	}
	if k.Config("CONFIG_BLK_DEV_UBLK") != "m" || k.Config("CONFIG_FOO") != "" {
		t.Errorf("config not read: ublk %q", k.Config("CONFIG_BLK_DEV_UBLK"))
	}
	if !k.HasModule("virtio_pci") || !k.HasModule("ublk_drv") || k.HasModule("nvme_tcp") {
		t.Error("module index wrong")
	}
	mods, err := k.resolveModules([]string{"virtio_pci"})
	if err != nil || len(mods) != 0 {
		t.Errorf("built-in virtio_pci: %v, %v; want nothing to load", mods, err)
	}
}
