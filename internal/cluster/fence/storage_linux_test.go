//go:build linux

package fence_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/fence"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Guest x exports its drive; o owns the volume first, n takes it over.
var (
	idX = nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:0a0a0a0a-0000-4000-8000-0000000000aa", ID: "0a0a0a0a-0000-4000-8000-0000000000aa"}
	idO = nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-0000000000bb", ID: "0b0b0b0b-0000-4000-8000-0000000000bb"}
	idN = nvmf.HostIdentity{NQN: "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-0000-4000-8000-0000000000cc", ID: "0c0c0c0c-0000-4000-8000-0000000000cc"}

	secretO = nvmf.Secret{Key: bytes.Repeat([]byte{0xb1}, 32)}.Reveal()
	secretN = nvmf.Secret{Key: bytes.Repeat([]byte{0xc1}, 32)}.Reveal()
)

const (
	fencedVol = "0f0f0f0f-0000-4000-8000-000000000013"
	driveX    = "x-disk0" // the virtio serial vmtest gives x's disk
)

// TestIntegrationStorageFence is the storage fence with etcd in the loop
// and real nvmet/nvme-tcp, Debian 6.12, three guests. Guest x runs an
// etcd member (on its loopback: only x talks to it) and the drive
// exporter's pass (owner keys -> plan.FencedExporterInput ->
// exporter.Reconcile -> fence.Ack, as the daemon does):
//
//   - o holds the owner key at epoch Eo: x exports its drive to o only and
//     acknowledges Eo; o connects and writes;
//   - the key moves to n (o's lease revoked, n acquires En > Eo): before
//     x's pass fence.Wait(En) does not return (x acknowledged Eo); the pass
//     unlinks the drive (o's controller is torn down: o's write fails with
//     a path error), allows n only, acknowledges En, and Wait returns;
//   - o cannot connect again (not an allowed host), n connects and writes
//     and reads back.
func TestIntegrationStorageFence(t *testing.T) {
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{
			{Name: "x", Kernel: vmtest.Kernel612, Modules: []string{"nvmet", "nvmet_tcp"}, MemoryMB: 768, Disks: []vmtest.Disk{{Size: 32 << 20}}},
			{Name: "o", Kernel: vmtest.Kernel612, Modules: []string{"nvme_tcp"}, MemoryMB: 512},
			{Name: "n", Kernel: vmtest.Kernel612, Modules: []string{"nvme_tcp"}, MemoryMB: 512},
		},
		Timeout: 300 * time.Second,
	}, func(t *testing.T, g *vmtest.Env) {
		switch g.Name {
		case "x":
			exporterNode(t, g)
		case "o":
			oldOwner(t, g)
		case "n":
			newOwner(t, g)
		}
	})
}

func exporterNode(t *testing.T, g *vmtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Second)
	defer cancel()
	cli := etcdtest.Start(t)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.Alive("x"), `{"version":1}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	node := func(name string, id nvmf.HostIdentity) model.NodeStatus {
		return model.NodeStatus{Alive: true, Node: model.Node{Name: name, HostNQN: id.NQN, StorageAddresses: []string{g.Addr(name)}}}
	}
	// The record names o as the desired owner throughout: the exporter
	// follows the owner key, not the record.
	view := plan.View{Self: "x", Nodes: []model.NodeStatus{node("x", idX), node("o", idO), node("n", idN)},
		Volumes: []model.Volume{{Version: 1, UUID: fencedVol, Name: "f", K: 1, M: 1, Groups: 1, Owner: "o", State: model.VolumeReady,
			Members: []model.VolumeMember{{Slot: 0, Node: "x", Domain: "x", Drive: driveX}, {Slot: 1, Node: "y", Domain: "y", Drive: "y-disk0"}}}},
		HostKeys: map[string]nvmf.SecretText{"o": nvmf.SecretText(secretO), "n": nvmf.SecretText(secretN)}}
	x := exporter.New("")
	pass := func() exporter.Result {
		t.Helper()
		hs, err := owner.List(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		ks := map[string]plan.OwnerKey{}
		for u, h := range hs {
			ks[u] = plan.OwnerKey{Node: h.Node, Epoch: uint64(h.Epoch)}
		}
		in := plan.FencedExporterInput(view, []exporter.Drive{{ID: driveX, Path: g.Disks[0]}}, ks)
		in.HostNQN = idX.NQN
		res, err := x.Reconcile(ctx, in)
		if err != nil || len(res.Problems) > 0 {
			t.Fatalf("reconcile: %v, problems %v", err, res.Problems)
		}
		for _, v := range in.Volumes {
			if err := fence.Ack(ctx, cli, lease.ID, v.UUID, "x", v.Epoch, ks[v.UUID].Node); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("pass: exports %+v, fenced %v", res.Exports, res.Fenced)
		return res
	}
	sO, err := owner.NewSession(ctx, cli, owner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eO, err := owner.Acquire(ctx, sO, fencedVol, "o")
	if err != nil {
		t.Fatal(err)
	}
	pass()
	allowsOnly(t, idO.NQN)
	if err := fence.Wait(ctx, cli, fencedVol, uint64(eO), []string{"x"}); err != nil {
		t.Fatalf("Wait(Eo) after the pass: %v", err)
	}
	g.Signal(t, "exported")

	g.Wait(t, "o", "writing")
	if err := sO.Close(ctx); err != nil { // o loses the key (its lease revoked)
		t.Fatal(err)
	}
	sN, err := owner.NewSession(ctx, cli, owner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sN.Close(context.Background())
	eN, err := owner.Acquire(ctx, sN, fencedVol, "n")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("owner key: o at epoch %d, now n at epoch %d", eO, eN)
	// x still serves o and has acknowledged Eo only: n must not proceed.
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	err = fence.Wait(wctx, cli, fencedVol, uint64(eN), []string{"x"})
	wcancel()
	if !strings.Contains(fmt.Sprint(err), fmt.Sprintf("x (acknowledged epoch %d)", eO)) {
		t.Fatalf("Wait(En) before x's pass: %v; want x pending at epoch %d", err, eO)
	}
	waited := make(chan error, 1)
	go func() { waited <- fence.Wait(ctx, cli, fencedVol, uint64(eN), []string{"x"}) }()
	res := pass()
	if len(res.Fenced) != 1 || res.Fenced[0] != driveX {
		t.Fatalf("the key move fenced %v, want [%s]", res.Fenced, driveX)
	}
	allowsOnly(t, idN.NQN)
	if err := <-waited; err != nil {
		t.Fatalf("Wait(En) after x's pass: %v", err)
	}
	acks, err := fence.Acks(ctx, cli, fencedVol)
	if err != nil || acks["x"].Epoch != uint64(eN) || acks["x"].Owner != "n" {
		t.Fatalf("acks %+v, %v; want x at epoch %d for n", acks, err, eN)
	}
	g.Signal(t, "moved")
	g.Wait(t, "o", "fenced")
	g.Wait(t, "n", "done")
}

// allowsOnly reads configfs: x's drive subsystem allows exactly host (never
// any host) and is linked on the drive port.
func allowsOnly(t *testing.T, host string) {
	t.Helper()
	root := nvmet.DefaultRoot
	sub := filepath.Join(root, "subsystems", exporter.NQN(driveX))
	if b, err := os.ReadFile(filepath.Join(sub, "attr_allow_any_host")); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("attr_allow_any_host = %q, %v", b, err)
	}
	ents, err := os.ReadDir(filepath.Join(sub, "allowed_hosts"))
	if err != nil || len(ents) != 1 || ents[0].Name() != host {
		t.Fatalf("allowed hosts %v (%v), want exactly %s", ents, err, host)
	}
	if _, err := os.Lstat(filepath.Join(root, "ports", fmt.Sprint(exporter.PortBase), "subsystems", exporter.NQN(driveX))); err != nil {
		t.Fatalf("drive not linked on its port: %v", err)
	}
}

// connect imports x's drive as id and returns its device.
func connect(t *testing.T, ctx context.Context, g *vmtest.Env, id nvmf.HostIdentity, secret string) string {
	t.Helper()
	res, err := importer.New().Reconcile(ctx, importer.Input{Identity: id, Secret: nvmf.SecretText(secret),
		Remotes: []importer.Remote{{NQN: exporter.NQN(driveX), Address: g.Addr("x")}}})
	if err != nil || len(res.Devices) != 1 {
		t.Fatalf("import as %s: %+v, %v", id.NQN, res, err)
	}
	return res.Devices[0].Path
}

func oldOwner(t *testing.T, g *vmtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Second)
	defer cancel()
	// A refused DH-HMAC-CHAP exchange can surface only at the admin
	// command timeout: bound it.
	if err := os.WriteFile("/sys/module/nvme_core/parameters/admin_timeout", []byte("15"), 0); err != nil {
		t.Fatal(err)
	}
	g.Wait(t, "x", "exported")
	dev := connect(t, ctx, g, idO, secretO)
	if err := directIO(dev, 4<<20, 16); err != nil {
		t.Fatal(err)
	}
	ioErr := make(chan error, 1)
	go func() { ioErr <- directIO(dev, 16<<20, 0) }()
	g.Signal(t, "writing")
	g.Wait(t, "x", "moved")
	// x unlinked the drive before it acknowledged: o's controller is gone,
	// so its writes fail (with the path error, or the device gone).
	select {
	case err := <-ioErr:
		t.Logf("old owner's write failed after the fence: %v", err)
	case <-ctx.Done():
		t.Fatal("the old owner's writes kept succeeding after x acknowledged the new epoch")
	}
	h := nvmf.NewHost()
	if c, err := h.Connect(nvmf.Options{Transport: nvmf.TCP, Address: g.Addr("x"), ServiceID: exporter.DefaultServiceID,
		NQN: exporter.NQN(driveX), HostNQN: idO.NQN, HostID: idO.ID, DHCHAPSecret: secretO}); err == nil {
		h.Disconnect(c.Name)
		t.Fatal("the old owner connected again after the fence")
	} else {
		t.Logf("old owner's new connect refused: %v", err)
	}
	cs, err := h.Sysfs.Controllers()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.State == "live" && c.SubsystemNQN == exporter.NQN(driveX) {
			t.Errorf("old owner's controller %s is live again", c.Name)
		}
	}
	g.Signal(t, "fenced")
}

func newOwner(t *testing.T, g *vmtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Second)
	defer cancel()
	g.Wait(t, "x", "moved")
	dev := connect(t, ctx, g, idN, secretN)
	if err := directIO(dev, 8<<20, 16); err != nil {
		t.Fatal(err)
	}
	g.Signal(t, "done")
}

// directIO writes 64 KiB blocks with O_DIRECT from off on (16 slots,
// round robin) and reads each back: rounds blocks, or until an error when
// rounds is 0. It returns the first error.
func directIO(dev string, off int64, rounds int) error {
	f, err := os.OpenFile(dev, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	w, r := engine.AlignedBuffer(64<<10), engine.AlignedBuffer(64<<10)
	for i := range w {
		w[i] = byte(i ^ 0x3c)
	}
	for i := 0; rounds == 0 || i < rounds; i++ {
		at := off + int64(i%16)<<16
		if _, err := f.WriteAt(w, at); err != nil {
			return fmt.Errorf("write %s: %w", dev, err)
		}
		if _, err := f.ReadAt(r, at); err != nil {
			return fmt.Errorf("read %s: %w", dev, err)
		}
		if !bytes.Equal(w, r) {
			return fmt.Errorf("%s: read back at %d differs", dev, at)
		}
	}
	return nil
}
