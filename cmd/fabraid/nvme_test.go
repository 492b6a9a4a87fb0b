package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmf"
)

func TestNvmeGenKeyAndHostID(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"nvme", "gen-dhchap-key", "--key-length", "48"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	s, err := nvmf.ParseSecret(strings.TrimSpace(out.String()))
	if err != nil || len(s.Key) != 48 {
		t.Fatalf("generated %q: %v", out.String(), err)
	}

	dir := t.TempDir()
	root = newRootCmd()
	root.SetArgs([]string{"nvme", "gen-dhchap-key", "--out", filepath.Join(dir, "k")})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "k")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}

	out.Reset()
	root = newRootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"nvme", "hostid", "--host-dir", filepath.Join(dir, "nvme")})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "hostnqn nqn.2014-08.org.nvmexpress:uuid:") {
		t.Fatalf("hostid output %q", out.String())
	}

	root = newRootCmd()
	root.SetArgs([]string{"nvme", "gen-dhchap-key", "--key-length", "16"})
	root.SetErr(&bytes.Buffer{})
	if err := root.Execute(); err == nil {
		t.Fatal("16-byte key accepted")
	}
}
