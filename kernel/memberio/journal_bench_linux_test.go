//go:build linux

package memberio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/internal/nvmetest"
	"github.com/fabraid/fabraid/kernel/memberio"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// journalVariant is one engine configuration of TestBenchOwnerJournalVM.
type journalVariant struct {
	name       string
	owner      string // engine.Options.OwnerDomain
	dataOffset int64  // engine.Config.DataOffset (0: the default)
	// ownerParity: the owner-parity layout (engine.Config.FixedParity)
	// with the owner's two members on the parity slots, as cluster
	// placement makes it.
	ownerParity bool
}

// TestBenchOwnerJournalVM measures what owner-domain journaling costs on
// the owner's member path: a 4+2 engine (two members in the owner's
// domain, as a cluster volume has) over six virtio disks that nvmet
// exports on 127.0.0.1 and nvme-tcp imports, with the memberio executor,
// written with 1 MiB writes (one writer, then four) over 48 MiB that the
// previous pass already wrote. Variants: no journal (the reference), the
// owner journal with a 1 MiB data offset (a ~1 MiB journal: members
// below ~128 MiB, volumes created before the journal grew) and with the
// 9 MiB offset members of 1 GiB and more get by default (an ~8.9 MiB
// journal), and the owner-parity layout with that journal (the owner's
// members on the parity slots: nothing to log). Three alternating rounds, medians; per variant MiB/s, the
// ratio to no journal, guest CPU-seconds per GiB, and write requests the
// member disks completed per MiB (after every merge; flushes a retire
// sends as empty writes count too). Run with `make vmbench`.
func TestBenchOwnerJournalVM(t *testing.T) {
	if !vmtest.InGuest() && os.Getenv("FABRAID_VMBENCH") != "1" {
		t.Skip("benchmark: set FABRAID_VMBENCH=1 (make vmbench)")
	}
	disks := make([]vmtest.Disk, 6)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 96 << 20}
	}
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{Name: "ojb", Kernel: vmtest.Kernel612, CPUs: 2,
			Modules: nvmetest.Modules(true, true, false), Disks: disks}},
		Timeout: 15 * time.Minute,
	}, func(t *testing.T, g *vmtest.Env) {
		remote := importOverLoopback(t, g.Disks)
		variants := []journalVariant{{"none", "", 0, false}, {"journal_1m", "own", engine.DefaultDataOffset, false},
			{"journal_default_1g", "own", 9 << 20, false}, {"owner_parity_1g", "own", 9 << 20, true}}
		const rounds = 3
		got := map[string][]readSample{}
		writes := map[string]float64{}
		for r := range rounds {
			for i := range variants {
				v := variants[(i+r)%len(variants)]
				for _, writers := range []int{1, 4} {
					s, perMiB := journalRun(t, v, remote, g.Disks, writers)
					key := fmt.Sprintf("%s/%d", v.name, writers)
					t.Logf("round %d %s, %d writers: %.1f MiB/s, %.2f CPU-s/GiB, %.2f member writes per MiB", r, v.name, writers, s.mibs, s.cpuPerGiB, perMiB)
					got[key] = append(got[key], s)
					writes[key] += perMiB / rounds
				}
			}
		}
		for _, writers := range []int{1, 4} {
			ref := medianSample(got[fmt.Sprintf("none/%d", writers)])
			for _, v := range variants {
				key := fmt.Sprintf("%s/%d", v.name, writers)
				s := medianSample(got[key])
				line, _ := json.Marshal(map[string]any{
					"bench": "owner_journal_" + v.name, "writers": writers, "mib_s": round(s.mibs, 1), "no_journal_mib_s": round(ref.mibs, 1),
					"ratio": round(s.mibs/ref.mibs, 3), "cpu_s_per_gib": round(s.cpuPerGiB, 2), "no_journal_cpu_s_per_gib": round(ref.cpuPerGiB, 2),
					"member_writes_per_mib": round(writes[key], 2), "rounds": rounds, "guest_cpus": 2, "kernel": g.Kernel,
				})
				fmt.Printf("VMBENCH %s\n", line)
			}
		}
	})
}

// importOverLoopback exports each disk as its own nvmet subsystem on
// 127.0.0.1:4420 and connects to each with the member profile; it returns
// the multipath heads in disk order.
func importOverLoopback(t *testing.T, disks []string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := nvmf.LoadHostIdentity("/etc/nvme")
	if err != nil {
		t.Fatal(err)
	}
	spec := nvmet.Spec{Hosts: []nvmet.Host{{NQN: id.NQN}}}
	port := nvmet.Port{ID: 18002, Transport: nvmet.TCP, Address: "127.0.0.1", ServiceID: "4420"}
	nqn := func(i int) string { return fmt.Sprintf("nqn.2026-11.io.fabraid:drive:ojb%d", i) }
	for i, d := range disks {
		spec.Subsystems = append(spec.Subsystems, nvmet.Subsystem{NQN: nqn(i), Model: "fabraid", AllowedHosts: []string{id.NQN},
			Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: d}}})
		port.Subsystems = append(port.Subsystems, nqn(i))
	}
	spec.Ports = []nvmet.Port{port}
	if _, err := nvmet.New("").Apply(spec); err != nil {
		t.Fatal(err)
	}
	host := nvmf.NewHost()
	prof, _ := nvmf.Profile(nvmf.ProfileMember)
	var heads []string
	for i := range disks {
		c, err := host.Connect(nvmf.Options{Transport: nvmf.TCP, Address: "127.0.0.1", ServiceID: "4420", NQN: nqn(i),
			HostNQN: id.NQN, HostID: id.ID, Timeouts: &prof})
		if err != nil {
			t.Fatal(err)
		}
		if c, err = host.WaitPaths(ctx, c.Name, 1); err != nil {
			t.Fatal(err)
		}
		heads = append(heads, "/dev/"+c.Paths[0].Head)
	}
	return heads
}

// journalRun creates variant v's volume on devs, writes 48 MiB with 1 MiB
// writes from writers goroutines (disjoint offsets), then measures the
// same pass again; it returns the measured pass and the write requests
// the disks completed per MiB in it.
func journalRun(t *testing.T, v journalVariant, devs, disks []string, writers int) (readSample, float64) {
	t.Helper()
	exec, err := memberio.NewExecutor(memberio.ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	domains := []string{"own", "own", "n1", "n1", "n2", "n2"}
	if v.ownerParity {
		domains = []string{"n1", "n1", "n2", "n2", "own", "own"}
	}
	vol, err := engine.Create(engine.Config{Name: "ojb", K: 4, M: 2, ChunkSize: 64 << 10, RegionSize: 1 << 20, AssumeZeroed: true,
		DataOffset: v.dataOffset, Domains: domains, FixedParity: v.ownerParity},
		openMembers(t, devs, memberio.Options{Exclusive: true}), devs, engine.Options{Executor: exec, OwnerDomain: v.owner})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	const total = 48 << 20
	pass := func() error {
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := engine.AlignedBuffer(1 << 20)
				fill(buf, uint64(w+1))
				for off := int64(w) << 20; off < total; off += int64(writers) << 20 {
					if _, err := vol.WriteAt(buf, off); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	w0, c0, t0 := diskWrites(t, disks), busySeconds(), time.Now()
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	el, c1, w1 := time.Since(t0), busySeconds(), diskWrites(t, disks)
	gib := float64(total) / (1 << 30)
	return readSample{mibs: gib * 1024 / el.Seconds(), cpuPerGiB: (c1 - c0) / gib}, float64(w1-w0) / (total >> 20)
}

// diskWrites sums the write requests the disks completed (field 5 of
// /sys/block/DEV/stat).
func diskWrites(t *testing.T, disks []string) int64 {
	t.Helper()
	var n int64
	for _, d := range disks {
		n += blockStat(t, d, 4)
	}
	return n
}
