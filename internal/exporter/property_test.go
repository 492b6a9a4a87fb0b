package exporter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// randomInput draws a node with up to 5 drives and up to 4 volumes over
// them and other nodes' drives, owners among 3 hosts (one of them this
// node), some without a secret.
func randomInput(r *rand.Rand) (Input, nvmet.Features) {
	hosts := []string{hostA, hostB, hostC}
	keys := map[string]string{}
	for i, h := range hosts {
		if r.IntN(4) > 0 {
			keys[h] = nvmf.Secret{Key: bytes.Repeat([]byte{byte(i + 1 + r.IntN(2)*16)}, 32)}.Reveal()
		}
	}
	in := Input{HostNQN: hostA, Addresses: []string{"10.0.0.1"}, AllowNoAuth: r.IntN(4) == 0, AllowUnauthenticated: r.IntN(2) == 0}
	for i := range r.IntN(6) {
		in.Drives = append(in.Drives, Drive{ID: "d" + strconv.Itoa(i), Path: "/dev/nvme" + strconv.Itoa(i) + "n1"})
	}
	for v := range r.IntN(5) {
		owner := hosts[r.IntN(3)]
		vol := Volume{UUID: "v" + strconv.Itoa(v), Owner: Host{NQN: owner, Secret: nvmf.SecretText(keys[owner])}}
		if r.IntN(8) == 0 { // a stale secret for the same host
			vol.Owner.Secret = nvmf.SecretText(nvmf.Secret{Key: bytes.Repeat([]byte{0x77}, 32)}.Reveal())
		}
		for range 1 + r.IntN(4) {
			id := "d" + strconv.Itoa(r.IntN(8)) // d5..d7 are other nodes' drives
			if !slices.Contains(vol.Members, id) {
				vol.Members = append(vol.Members, id)
			}
		}
		in.Volumes = append(in.Volumes, vol)
	}
	return in, nvmet.Features{Auth: r.IntN(3) > 0}
}

// checkDesired: every export is a local drive of exactly one volume owned
// elsewhere, allowed to that owner only, with its secret on an auth
// kernel; every such drive is exported unless a Problem names it.
func checkDesired(t *testing.T, in Input, f nvmet.Features, d Desired) {
	t.Helper()
	if err := d.Spec.Validate(nvmet.DriveOwnership()); err != nil {
		t.Fatalf("invalid spec: %v", err)
	}
	if !f.Auth && !in.AllowUnauthenticated {
		if !errors.Is(d.Refused, ErrAuthRequired) || !reflect.DeepEqual(d.Spec, nvmet.Spec{}) || len(d.Exports)+len(d.Problems) > 0 {
			t.Fatalf("no auth, require_auth: refused %v, spec %+v, exports %v, problems %v; want refused and nothing", d.Refused, d.Spec, d.Exports, d.Problems)
		}
		return
	}
	if d.Refused != nil {
		t.Fatalf("refused %v (auth %v, allow unauthenticated %v)", d.Refused, f.Auth, in.AllowUnauthenticated)
	}
	local := map[string]bool{}
	for _, dr := range in.Drives {
		local[dr.ID] = true
	}
	vols := map[string][]Volume{}
	for _, v := range in.Volumes {
		for _, m := range v.Members {
			vols[m] = append(vols[m], v)
		}
	}
	keys := map[string]string{}
	for _, h := range d.Spec.Hosts {
		keys[h.NQN] = h.DHCHAPKey
	}
	exported := map[string]bool{}
	for _, s := range d.Spec.Subsystems {
		id := strings.TrimPrefix(s.NQN, NQNPrefix)
		exported[id] = true
		vs := vols[id]
		switch {
		case !local[id]:
			t.Fatalf("%s exported but not local", id)
		case len(vs) != 1:
			t.Fatalf("%s exported while in %d volumes", id, len(vs))
		case len(s.AllowedHosts) != 1 || s.AllowedHosts[0] != vs[0].Owner.NQN || s.AllowAnyHost:
			t.Fatalf("%s allows %v, owner %s", id, s.AllowedHosts, vs[0].Owner.NQN)
		case s.AllowedHosts[0] == in.HostNQN:
			t.Fatalf("%s exported to this node", id)
		case f.Auth && keys[s.AllowedHosts[0]] != vs[0].Owner.Secret.Reveal():
			t.Fatalf("%s: host key is not the owner's secret", id)
		case f.Auth && !in.AllowNoAuth && keys[s.AllowedHosts[0]] == "":
			t.Fatalf("%s exported without DH-HMAC-CHAP on an auth kernel", id)
		case !f.Auth && keys[s.AllowedHosts[0]] != "":
			t.Fatalf("%s: a key on a kernel without auth", id)
		}
	}
	for id := range local {
		vs := vols[id]
		if exported[id] || len(vs) == 0 || len(vs) == 1 && vs[0].Owner.NQN == in.HostNQN {
			continue
		}
		named := false
		for _, p := range d.Problems {
			named = named || strings.Contains(p.Error(), "drive "+id+" ") || strings.Contains(p.Error(), "drive "+id+":") ||
				len(vs) == 1 && strings.Contains(p.Error(), "host "+vs[0].Owner.NQN+":")
		}
		if !named {
			t.Fatalf("%s (volumes %v) neither exported nor named in problems %v", id, vs, d.Problems)
		}
	}
}

// TestDesireProperties checks Desire and Fence on random inputs;
// TEST_SEED replays.
func TestDesireProperties(t *testing.T) {
	seed := rand.Uint64()
	if s, err := strconv.ParseUint(os.Getenv("TEST_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("TEST_SEED=%d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	fencedAny := 0
	for range 5000 {
		in, f := randomInput(r)
		d := Desire(in, f)
		checkDesired(t, in, f, d)
		if _, fenced := Fence(d.Spec, asState(d.Spec), nil); len(fenced) != 0 {
			t.Fatalf("converged state fences %v", fenced)
		}
		// From another node state: the fence step unlinks every drive whose
		// access changes, and after it nothing is left to fence.
		oin, _ := randomInput(r)
		oin.Drives = in.Drives
		old := Desire(oin, f).Spec
		step, fenced := Fence(d.Spec, asState(old), nil)
		fencedAny += len(fenced)
		p, err := nvmet.Diff(step, asState(old), nvmet.DriveOwnership())
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range fenced {
			if !strings.Contains(p.String(), fmt.Sprintf("unlink ports/%d/subsystems/%s\n", PortBase, NQN(id))) {
				t.Fatalf("fenced %s but the step keeps it linked:\n%s", id, p)
			}
		}
		if _, again := Fence(d.Spec, asState(step), nil); len(again) != 0 {
			t.Fatalf("after the fence step still fencing %v", again)
		}
		oldHost := map[string]string{}
		for _, s := range old.Subsystems {
			oldHost[s.NQN] = s.AllowedHosts[0]
		}
		for _, s := range d.Spec.Subsystems {
			if h, ok := oldHost[s.NQN]; ok && h != s.AllowedHosts[0] && !slices.Contains(fenced, strings.TrimPrefix(s.NQN, NQNPrefix)) {
				t.Fatalf("%s moves from %s to %s unfenced", s.NQN, h, s.AllowedHosts[0])
			}
		}
	}
	if fencedAny == 0 {
		t.Fatal("generator never produced an owner change")
	}
}

// TestFeaturesInterruptedProbe: a probe's objects left by a crash are
// removed before probing again (paths only: a plain directory tree). The
// kernel backend probes with kernel/nvmet DefaultOwnership's names, outside
// the drive scope.
func TestFeaturesInterruptedProbe(t *testing.T) {
	root := t.TempDir()
	probe := nvmet.DefaultOwnership().SubsystemPrefix + "probe"
	for _, d := range []string{"hosts", "subsystems", "ports", "hosts/" + probe} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	x := &Exporter{Target: &pnvmet.Backend{Root: root, SysModule: t.TempDir()}}
	if _, err := x.Features(context.Background()); err != nil {
		t.Fatalf("probe after an interrupted one: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "hosts", probe)); err == nil {
		t.Fatal("probe host left behind")
	}
}
