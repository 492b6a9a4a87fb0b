//go:build linux

package nvmf_test

import (
	"context"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/internal/nvmetest"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/vishvananda/netlink"
)

// TestIntegrationRDMA exports a disk over nvmet-rdma and connects it with
// nvme-rdma between two 6.12 guests, on soft-RoCE (rdma_rxe) devices
// layered on their virtio NICs: discovery over rdma, connect, I/O check,
// disconnect, teardown.
func TestIntegrationRDMA(t *testing.T) {
	// rdma_rxe computes its ICRC with the "crc32" shash, loaded through
	// request_module, which the guest cannot do: list it.
	rxe := []string{"rdma_rxe", "crc32_generic"}
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{
			{Name: "a", Kernel: vmtest.Kernel612, Modules: append([]string{"nvmet", "nvmet_rdma"}, rxe...), Disks: []vmtest.Disk{{Size: 16 << 20}}},
			{Name: "b", Kernel: vmtest.Kernel612, Modules: append([]string{"nvme_rdma"}, rxe...)},
		},
		Timeout: 120 * time.Second,
	}, func(t *testing.T, g *vmtest.Env) {
		if err := netlink.RdmaLinkAdd("rxe0", "rxe", "eth0"); err != nil {
			t.Fatalf("soft-RoCE on eth0: %v", err)
		}
		switch g.Name {
		case "a":
			tg := nvmet.New("")
			spec := nvmet.Spec{
				Hosts: []nvmet.Host{{NQN: hostB.NQN}},
				Subsystems: []nvmet.Subsystem{{NQN: s1, AllowedHosts: []string{hostB.NQN},
					Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: g.Disks[0]}}}},
				Ports: []nvmet.Port{{ID: 18010, Transport: nvmet.RDMA, Address: g.Addr("a"), ServiceID: "4420", Subsystems: []string{s1}}},
			}
			if _, err := tg.Apply(spec); err != nil {
				t.Fatal(err)
			}
			if p, err := tg.Plan(spec); err != nil || len(p) != 0 {
				t.Fatalf("second plan (%v):\n%s", err, p)
			}
			g.Signal(t, "exported")
			g.Wait(t, "b", "done")
			if _, err := tg.Apply(nvmet.Spec{}); err != nil {
				t.Fatal(err)
			}
		case "b":
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			g.Wait(t, "a", "exported")
			h := nvmf.NewHost()
			o := nvmf.Options{Transport: nvmf.RDMA, Address: g.Addr("a"), ServiceID: "4420", HostNQN: hostB.NQN, HostID: hostB.ID}
			l, err := h.Discover(o)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range l.Entries {
				t.Logf("discovery: %s %s %s %s:%s", e.Subtype, e.Transport(), e.SubNQN, e.TrAddr, e.TrSvcID)
				found = found || e.SubNQN == s1 && e.Transport() == nvmf.RDMA
			}
			if !found {
				t.Fatalf("discovery over rdma does not list %s", s1)
			}
			prof, _ := nvmf.Profile(nvmf.ProfileMember)
			o.NQN, o.Timeouts = s1, &prof
			c, err := h.Connect(o)
			if err != nil {
				t.Fatal(err)
			}
			if c, err = h.WaitPaths(ctx, c.Name, 1); err != nil {
				t.Fatal(err)
			}
			if c.Transport != "rdma" || c.State != "live" {
				t.Errorf("controller %+v", c)
			}
			dev := "/dev/" + c.Paths[0].Head
			if err := nvmetest.WritePattern(dev, 9, 0, 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := nvmetest.CheckPattern(dev, 9, 0, 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := h.Disconnect(c.Name); err != nil {
				t.Fatal(err)
			}
			g.Signal(t, "done")
			// Give A time to see "done" before this guest's verdict lands.
			time.Sleep(time.Second)
		}
	})
}
