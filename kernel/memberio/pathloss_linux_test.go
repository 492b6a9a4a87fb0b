//go:build linux

package memberio_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/internal/nvmetest"
	"github.com/fabraid/fabraid/kernel/memberio"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

const (
	plNQN       = "nqn.2026-11.io.fabraid:drive:pathloss"
	plRegion    = 1 << 20
	plDiskBytes = 32 << 20
)

// TestIntegrationPathLoss runs a 3+1 engine volume on 6.12 whose slot 3 is
// a drive imported over nvme-tcp (nvmet on 127.0.0.1, member timeout
// profile, native multipath head), on memberio Members and Executor:
//
//   - the target port is removed under writes: the member fails as
//     unreachable (its controller is reconnecting), not as an I/O error;
//     the port comes back, the controller is live again, and a ReAdd of
//     the same drive resyncs only the regions written meanwhile (counted
//     from the block device's own write statistics: a small fraction of
//     the member), and every block reads back right without slot 0;
//   - the controller is deleted under writes (the block device vanishes):
//     unreachable again; connected anew, the drive is re-added under its
//     new device and again only the regions written meanwhile are resynced.
func TestIntegrationPathLoss(t *testing.T) {
	disks := make([]vmtest.Disk, 4)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: plDiskBytes}
	}
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{Name: "pl", Kernel: vmtest.Kernel612, CPUs: 2,
			Modules: nvmetest.Modules(true, true, false), Disks: disks}},
		Timeout: 240 * time.Second,
	}, func(t *testing.T, g *vmtest.Env) { pathLoss(t, g) })
}

// plVolume is the volume under test with its model.
type plVolume struct {
	t     *testing.T
	vol   *engine.Volume
	model []byte
	seq   uint64
}

// writeStripe writes full stripe n with fresh data (every member is
// written) and records it in the model.
func (p *plVolume) writeStripe(n int64) error {
	sb := p.vol.Geometry().StripeBytes()
	off := (n * sb) % (p.vol.Size() / sb * sb)
	buf := engine.AlignedBuffer(int(sb))
	p.seq++
	fill(buf, p.seq)
	if _, err := p.vol.WriteAt(buf, off); err != nil {
		return err
	}
	copy(p.model[off:], buf)
	return nil
}

// failUnderWrites writes stripes until slot fails and returns its status.
func (p *plVolume) failUnderWrites(slot int, what string) engine.MemberStatus {
	p.t.Helper()
	var st engine.MemberStatus
	nvmetest.Eventually(p.t, 45*time.Second, "slot fails after "+what, func() error {
		if err := p.writeStripe(int64(p.seq * 7)); err != nil {
			return fmt.Errorf("write: %v", err) // never: one member of four
		}
		if st = p.vol.Status().Members[slot]; st.Role != superblock.RoleFailed {
			return fmt.Errorf("slot %d %s", slot, st.Role)
		}
		return nil
	})
	return st
}

// check reads every block back and compares it with the model.
func (p *plVolume) check(what string) {
	p.t.Helper()
	got := engine.AlignedBuffer(len(p.model))
	if _, err := p.vol.ReadAt(got, 0); err != nil {
		p.t.Fatalf("%s: read: %v", what, err)
	}
	if !bytes.Equal(got, p.model) {
		for i := 0; i < len(got); i += 4096 {
			if !bytes.Equal(got[i:i+4096], p.model[i:i+4096]) {
				p.t.Fatalf("%s: block at %d differs from what was written", what, i)
			}
		}
	}
}

// sectorsWritten returns the sectors written to block device dev (field 7
// of /sys/block/DEV/stat).
func sectorsWritten(t *testing.T, dev string) int64 { return blockStat(t, dev, 6) }

// blockStat returns field i (from 0) of /sys/block/DEV/stat.
func blockStat(t *testing.T, dev string, i int) int64 {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + strings.TrimPrefix(dev, "/dev/") + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n, err := strconv.ParseInt(f[i], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pathLoss(t *testing.T, g *vmtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Second)
	defer cancel()
	id, err := nvmf.LoadHostIdentity("/etc/nvme")
	if err != nil {
		t.Fatal(err)
	}
	tg := nvmet.New("")
	spec := nvmet.Spec{
		Hosts: []nvmet.Host{{NQN: id.NQN}},
		Subsystems: []nvmet.Subsystem{{NQN: plNQN, Model: "fabraid", AllowedHosts: []string{id.NQN},
			Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: g.Disks[3]}}}},
		Ports: []nvmet.Port{{ID: 18001, Transport: nvmet.TCP, Address: "127.0.0.1", ServiceID: "4420", Subsystems: []string{plNQN}}},
	}
	noPort := spec
	noPort.Ports = nil
	if _, err := tg.Apply(spec); err != nil {
		t.Fatal(err)
	}
	host := nvmf.NewHost()
	prof, _ := nvmf.Profile(nvmf.ProfileMember)
	opts := nvmf.Options{Transport: nvmf.TCP, Address: "127.0.0.1", ServiceID: "4420", NQN: plNQN,
		HostNQN: id.NQN, HostID: id.ID, Timeouts: &prof}
	connect := func() (nvmf.Controller, string) {
		t.Helper()
		c, err := host.Connect(opts)
		if err != nil {
			t.Fatal(err)
		}
		if c, err = host.WaitPaths(ctx, c.Name, 1); err != nil {
			t.Fatal(err)
		}
		return c, "/dev/" + c.Paths[0].Head
	}
	ctrl, remote := connect()
	t.Logf("remote member %s on controller %s (%s)", remote, ctrl.Name, ctrl.State)

	exec, err := memberio.NewExecutor(memberio.ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	paths := []string{g.Disks[0], g.Disks[1], g.Disks[2], remote}
	vol, err := engine.Create(engine.Config{Name: "pl", K: 3, M: 1, RegionSize: plRegion, AssumeZeroed: true},
		openMembers(t, paths, memberio.Options{Exclusive: true}), paths, engine.Options{Executor: exec})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	p := &plVolume{t: t, vol: vol, model: make([]byte, vol.Size())}
	// Fill the volume, then let two flushes clear the bitmap.
	sb := vol.Geometry().StripeBytes()
	for n := range vol.Size() / sb {
		if err := p.writeStripe(n); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := vol.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if st := vol.Status(); st.DirtyRegions != 0 {
		t.Fatalf("%d regions dirty after two flushes", st.DirtyRegions)
	}
	memberData := vol.Geometry().Rows * int64(vol.Geometry().ChunkSize)

	// away loses slot 3's path with lose, writes a little more, brings it
	// back with restore (which returns its device now), re-adds it, and
	// checks the resync and the data.
	away := func(what string, lose func(), restore func() string) {
		t.Helper()
		lose()
		st := p.failUnderWrites(3, what)
		if st.Failure != superblock.FailUnreachable {
			t.Fatalf("slot 3 after %s: failed (%s), want unreachable", what, st.Failure)
		}
		for i := range 3 { // written while it is away
			if err := p.writeStripe(int64(i*97 + 13)); err != nil {
				t.Fatal(err)
			}
		}
		dirty := vol.Status().DirtyRegions
		dev := restore()
		if err := vol.DetachFailed(3); err != nil {
			t.Fatal(err)
		}
		m, err := memberio.Open(dev, memberio.Options{Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		before := sectorsWritten(t, dev)
		if err := vol.ReAdd(m, dev); err != nil {
			t.Fatal(err)
		}
		if st := vol.Status().Members[3]; st.Role != superblock.RoleRebuilding || !st.Resync {
			t.Fatalf("slot 3 re-added after %s: %s (resync %v), want a resync of the bitmap's regions", what, st.Role, st.Resync)
		}
		if err := vol.Rebuild(ctx, engine.RebuildOptions{}); err != nil {
			t.Fatal(err)
		}
		resynced := (sectorsWritten(t, dev) - before) * 512
		t.Logf("PATH-LOSS %s: %d of %d regions dirty; re-add wrote %d bytes to the returning member of %d data bytes (%.1f%%)",
			what, dirty, memberData/plRegion, resynced, memberData, 100*float64(resynced)/float64(memberData))
		// The regions plus the metadata a re-add writes (superblocks,
		// bitmap, journal header): far less than the member.
		if resynced == 0 || resynced > dirty*plRegion+1<<20 || resynced > memberData/4 {
			t.Fatalf("re-add after %s wrote %d bytes to the member (%d dirty regions of %d bytes, member %d): not a bitmap resync",
				what, resynced, dirty, plRegion, memberData)
		}
		// Status reports what the resync had to cover and wrote.
		if lr := vol.Status().LastRebuild; lr == nil || !lr.Partial || lr.Regions != dirty || lr.CoverBytes != dirty*plRegion ||
			lr.Bytes != lr.CoverBytes || lr.Bytes > resynced || lr.MemberBytes != memberData {
			t.Fatalf("last rebuild in status: %+v, want a partial resync of the %d dirty regions (%d bytes; %d reached the device)",
				lr, dirty, dirty*plRegion, resynced)
		}
		if st := vol.Status().Members[3]; st.Role != superblock.RoleActive {
			t.Fatalf("slot 3 after the resync: %+v", st)
		}
		p.check("after the return (" + what + ")")
	}

	away("target port removed", func() {
		if _, err := tg.Apply(noPort); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		if _, err := tg.Apply(spec); err != nil {
			t.Fatal(err)
		}
		nvmetest.Eventually(t, 60*time.Second, "controller live again", func() error {
			c, err := host.Sysfs.Controller(ctrl.Name)
			if err != nil || c.State != "live" {
				return fmt.Errorf("controller %s: %s %v", ctrl.Name, c.State, err)
			}
			return nil
		})
		return remote
	})
	away("controller deleted", func() {
		if err := host.Disconnect(ctrl.Name); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		c, dev := connect()
		t.Logf("reconnected: %s on controller %s", dev, c.Name)
		ctrl = c
		return dev
	})
	// Slot 3's data, read through the volume without slot 0.
	if err := vol.FailMember(0); err != nil {
		t.Fatal(err)
	}
	p.check("without slot 0")
}
