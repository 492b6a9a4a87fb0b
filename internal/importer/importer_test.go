package importer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

var id = nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b", ID: "0b0b0b0b-0000-4000-8000-00000000000b"}

// makeVolume creates a 2+1 volume over n files in dir and returns the
// files and their member UUIDs, read back independently of the importer.
func makeVolume(t *testing.T, dir string) ([]string, [][16]byte) {
	t.Helper()
	var devs []engine.Member
	var paths []string
	for i := range 3 {
		p := filepath.Join(dir, "m"+string(rune('0'+i)))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(8 << 20); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, engine.NewFileMember(f))
		paths = append(paths, p)
	}
	v, err := engine.Create(engine.Config{Name: "v", K: 2, M: 1, AssumeZeroed: true}, devs, paths, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	var uuids [][16]byte
	for _, p := range paths {
		m, _, err := readIdentity(p)
		if err != nil {
			t.Fatal(err)
		}
		uuids = append(uuids, m)
	}
	return paths, uuids
}

func TestReconcileLocal(t *testing.T) {
	dir := t.TempDir()
	paths, uuids := makeVolume(t, dir)
	blank := filepath.Join(dir, "blank")
	if err := os.WriteFile(blank, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	im := &Importer{Host: &nvmf.Host{Sysfs: nvmf.Sysfs{Root: t.TempDir()}, Dev: dir}}
	unknown := [16]byte{1, 2, 3}
	// Local candidates in another order than the slots: the mapping comes
	// from the superblocks, not from the order or the names.
	in := Input{Identity: id, Members: [][16]byte{uuids[2], unknown, uuids[0], uuids[1]},
		Local: []string{paths[1], blank, paths[2], paths[0]}}
	res, err := im.Reconcile(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[16]byte]string{uuids[0]: paths[0], uuids[1]: paths[1], uuids[2]: paths[2]}
	if !reflect.DeepEqual(res.Paths, want) {
		t.Fatalf("paths %v, want %v", res.Paths, want)
	}
	if !reflect.DeepEqual(res.Missing, [][16]byte{unknown}) || len(res.Problems) != 0 {
		t.Fatalf("missing %v problems %v", res.Missing, res.Problems)
	}
	if len(res.Devices) != 4 || res.Devices[1].Err == nil {
		t.Fatalf("devices %+v: want 4, the blank one with an error", res.Devices)
	}

	// A copy of a member (a cloned drive) makes that member ambiguous.
	b, _ := os.ReadFile(paths[0])
	clone := filepath.Join(dir, "clone")
	if err := os.WriteFile(clone, b, 0o600); err != nil {
		t.Fatal(err)
	}
	in.Local = append(in.Local, clone)
	res, err = im.Reconcile(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Paths[uuids[0]]; ok || len(res.Problems) != 1 || !errors.Is(res.Problems[0], ErrDuplicate) {
		t.Fatalf("clone: paths %v problems %v, want member 0 unmapped with ErrDuplicate", res.Paths, res.Problems)
	}
	if res.Paths[uuids[1]] != paths[1] {
		t.Fatalf("clone spoiled other members: %v", res.Paths)
	}
}

func TestConnections(t *testing.T) {
	secret := nvmf.Secret{Key: make([]byte, 32)}.Reveal()
	in := Input{Identity: id, Secret: nvmf.SecretText(secret), Remotes: []Remote{
		{NQN: exporter.NQN("d1"), Address: "10.0.0.2"},
		{NQN: exporter.NQN("d2"), Address: "10.0.0.3", ServiceID: "4500"},
	}}
	got, err := Connections(in)
	if err != nil {
		t.Fatal(err)
	}
	prof, _ := nvmf.Profile(nvmf.ProfileMember)
	if len(got) != 2 || got[0].ServiceID != exporter.DefaultServiceID || got[1].ServiceID != "4500" ||
		*got[0].Timeouts != prof || got[0].DHCHAPSecret != secret || got[0].HostNQN != id.NQN || got[0].HostID != id.ID {
		t.Fatalf("connections %+v", got)
	}
	if strings.Contains(got[0].Redacted(), secret) {
		t.Fatal("redacted options show the secret")
	}
	if got[0].DHCHAPCtrlSecret != "" {
		t.Fatal("a remote without a controller key is asked for one")
	}

	// Bidirectional: the exporting node's controller key on its
	// connections, redacted; none without a host secret (the kernel
	// refuses dhchap_ctrl_secret alone).
	ctrl := nvmf.Secret{Key: bytes.Repeat([]byte{7}, 32)}.Reveal()
	in.Remotes[1].CtrlSecret = nvmf.SecretText(ctrl)
	if got, err = Connections(in); err != nil || got[1].DHCHAPCtrlSecret != ctrl || got[0].DHCHAPCtrlSecret != "" {
		t.Fatalf("controller keys %v: %v", []bool{got[0].DHCHAPCtrlSecret == ctrl, got[1].DHCHAPCtrlSecret == ctrl}, err)
	}
	if s := got[1].Redacted() + fmt.Sprintf("%v %+v", in, got[1]); strings.Contains(s, ctrl) || strings.Contains(s, ctrl[10:40]) {
		t.Fatal("redacted options or the input show the controller secret")
	}
	noHost := in
	noHost.Secret = ""
	if got, err = Connections(noHost); err != nil || got[1].DHCHAPCtrlSecret != "" {
		t.Fatalf("no host secret: controller secret passed (%v)", err)
	}

	in.Remotes = append(in.Remotes, Remote{NQN: "nqn.2026-11.io.fabraid:vol:x", Address: "10.0.0.2"})
	if _, err := Connections(in); err == nil || !strings.Contains(err.Error(), "not a drive export") {
		t.Fatalf("volume NQN accepted: %v", err)
	}
}

func TestImported(t *testing.T) {
	desired, err := Connections(Input{Identity: id, Remotes: []Remote{{NQN: exporter.NQN("d1"), Address: "10.0.0.2"}, {NQN: exporter.NQN("d2"), Address: "10.0.0.2"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctrl := func(name, nqn, state string, heads ...string) nvmf.Controller {
		c := nvmf.Controller{Name: name, SubsystemNQN: nqn, State: state, HostNQN: id.NQN,
			Address: nvmf.Address{TrAddr: "10.0.0.2", TrSvcID: exporter.DefaultServiceID}}
		for _, h := range heads {
			c.Paths = append(c.Paths, nvmf.Path{Name: h, Head: h})
		}
		return c
	}
	other := ctrl("nvme5", exporter.NQN("d1"), "live", "nvme5n1")
	other.HostNQN = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0000-4000-8000-00000000000c"
	got := imported(desired, []nvmf.Controller{
		ctrl("nvme0", exporter.NQN("d2"), "live", "nvme0n1"),
		ctrl("nvme1", exporter.NQN("d1"), "connecting", "nvme1n1"), // no usable path
		ctrl("nvme2", exporter.NQN("d1"), "live", "nvme2n1"),
		ctrl("nvme3", "nqn.2026-11.io.fabraid:vol:x", "live", "nvme3n1"), // not a member import
		other, // another host identity
	}, "/dev")
	want := []Device{{Path: "/dev/nvme0n1", Remote: exporter.NQN("d2")}, {Path: "/dev/nvme2n1", Remote: exporter.NQN("d1")}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("imported %+v, want %+v", got, want)
	}
}

// TestConnectionsTLS: a remote the caller decided TLS for is connected
// with the tls option; others are not.
func TestConnectionsTLS(t *testing.T) {
	in := Input{Identity: id, Secret: nvmf.SecretText(nvmf.Secret{Key: make([]byte, 32)}.Reveal()), Remotes: []Remote{
		{NQN: exporter.NQN("d1"), Address: "10.0.0.2", TLS: true},
		{NQN: exporter.NQN("d2"), Address: "10.0.0.3"},
	}}
	got, err := Connections(in)
	if err != nil || !got[0].TLS || got[1].TLS || !strings.Contains(got[0].Redacted(), "tls") {
		t.Fatalf("connections %+v: %v", got, err)
	}
}
