//go:build linux

package cluster_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationClusterVolume: three 6.12 guests with two virtio member
// disks each (and a third small disk holding the node's state directory,
// so it survives a power cut: the guests' root is an initramfs) run
// fabraidd and make a cluster (init on a, join b and c, as
// TestIntegrationClusterThreeGuests); every node claims its two disks.
//
//   - "fabraid volume create v --data 4 --parity 2" on a places the members
//     over the three nodes (2 each, node = failure domain) with a as owner,
//     waits until a has formatted them (remote ones imported over NVMe/TCP
//     with DH-HMAC-CHAP) and reports it ready. b and c (non-owners) find
//     the volume's multipath head, each writes its own region with O_DIRECT
//     and a checksum, then reads and checks the other's region.
//   - Host key rotation: a rotates its host secret (cluster rotate-keys
//     --host) while it writes through its volume device; no write fails,
//     b and c acknowledge, a's member controllers are re-keyed in place
//     and the volume stays optimal (rotateHostKeyUnderIO).
//   - Node loss: c keeps writing a small window while it powers b off (kills
//     its qemu): no write fails, and the volume turns degraded with b's two
//     members failed. c boots b again with the same disks: its fabraidd
//     starts from the state disk, a's importer finds b's members by UUID
//     and re-adds them; the resync writes only a small fraction of each
//     member (measured on b: sectors written to its drives since boot),
//     the volume is optimal again, a scrub finds no mismatch and c reads
//     every region back intact.
//
// Every node runs tlshd and nvme_tls = required (withNVMeTLS): member
// imports and volume paths use TLS 1.3 with the pair PSKs; a checks that
// its volume port requires TLS, and each consumer (a, b, c) that its
// controllers to the volume use a TLS key (checkConsumerTLS). A plain
// connect refused by a required volume port is
// TestIntegrationDriveExportImport's (internal/importer).
//
// The outsider check (a host that is not the owner, or presents no key or
// a wrong one, cannot connect to a drive export) is covered by
// TestIntegrationDriveExportImport in internal/importer.
func TestIntegrationClusterVolume(t *testing.T) {
	guests := withNVMeTLS(t, clusterVolumeGuests(t, nil), "required") // nvmetls_linux_test.go
	vmtest.Run(t, vmtest.Options{Guests: guests, Timeout: 900 * time.Second}, volumeGuest)
}

// clusterVolumeGuests are the guests a, b and c of the cluster volume
// tests on 6.12: fabraid and fabraidd, two member disks and a state disk
// each, plus extra[name] member disks after those.
func clusterVolumeGuests(t *testing.T, extra map[string]int) []vmtest.GuestConfig {
	files := map[string]string{
		"/usr/bin/fabraid":  vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid"),
		"/usr/bin/fabraidd": vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd"),
	}
	if ttl := os.Getenv("FABRAID_VMTEST_OWNER_TTL"); ttl != "" && !vmtest.InGuest() {
		if n, err := strconv.Atoi(ttl); err != nil || n < 1 {
			t.Fatalf("FABRAID_VMTEST_OWNER_TTL=%q: want seconds", ttl)
		}
		f := filepath.Join(t.TempDir(), "owner-ttl")
		if err := os.WriteFile(f, []byte(ttl), 0o644); err != nil {
			t.Fatal(err)
		}
		files[ownerTTLFile] = f
	}
	mods := []string{"nvmet", "nvmet_tcp", "nvme_tcp", "ublk_drv", "crc32c_generic", "ext4"}
	var guests []vmtest.GuestConfig
	for _, n := range []string{"a", "b", "c"} {
		disks := []vmtest.Disk{{Size: memberBytes}, {Size: memberBytes}, {Size: 32 << 20}}
		for range extra[n] {
			disks = append(disks, vmtest.Disk{Size: memberBytes})
		}
		guests = append(guests, vmtest.GuestConfig{Name: n, Kernel: vmtest.Kernel612, Modules: mods, MemoryMB: 768, Disks: disks, Files: files})
	}
	return guests
}

const (
	memberBytes = 64 << 20
	// regionBytes is the part of the volume a verifier node writes.
	regionBytes = 4 << 20
	// windowOff and windowBytes: what c writes while b is away.
	windowOff   = 2 * regionBytes
	windowBytes = 256 << 10
)

func regionOf(node string) int64 {
	return map[string]int64{"b": 0, "c": 1}[node] * regionBytes
}

func step(t *testing.T, start time.Time, format string, a ...any) {
	t.Helper()
	t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
}

func volumeGuest(t *testing.T, g *vmtest.Env) {
	start := time.Now()
	mountState(t, g)
	if g.BootNum > 1 {
		returnedNode(t, g, start)
		return
	}
	formCluster(t, g, start)
	switch g.Name {
	case "a":
		g.Wait(t, "c", "joined")
		step(t, start, "creating 4+2 volume v over the three nodes")
		out := mustFabraid(t, "volume", "create", "v", "--data", "4", "--parity", "2", "--json")
		var in api.Volume
		if err := json.Unmarshal([]byte(out), &in); err != nil {
			t.Fatal(err)
		}
		step(t, start, "created %s, owner %s, state %s, %d bytes, device %q", in.UUID, in.Owner, in.State, in.Size, in.Device)
		if in.Owner != "a" || in.State != "optimal" {
			t.Fatalf("volume v: owner %q state %q, want a, optimal", in.Owner, in.State)
		}
		checkVolumePortTLS(t)
		if in.Device != "" {
			checkConsumerTLS(t, in.NQN) // a's own path to its export
		}
		domains := map[string]int{}
		for _, m := range in.Members {
			domains[m.Domain]++
		}
		if len(in.Members) != 6 || domains["a"] != 2 || domains["b"] != 2 || domains["c"] != 2 {
			t.Fatalf("members %+v, want 2 on each of a, b, c", in.Members)
		}
		g.Signal(t, "created")
		g.Wait(t, "b", "verified")
		g.Wait(t, "c", "verified")
		// A member path that missed its 2 s keep-alive while the guests
		// were starved of CPU fails as unreachable and is re-added by the
		// owner (bitmap resync): the volume is optimal again by itself.
		in = waitState(t, start, "optimal", 3*time.Minute)
		rotateHostKeyUnderIO(t, start, in.Device) // hostrotate_linux_test.go
		mustFabraid(t, "volume", "list")
		g.Signal(t, "optimal")

		// b is powered off by c and booted again.
		g.Wait(t, "c", "b-degraded")
		g.Wait(t, "b", "back")
		in = waitState(t, start, "optimal", 5*time.Minute)
		if r := in.Rebuild; r == nil || !r.Partial || r.Bytes <= 0 || r.Bytes > r.MemberBytes/8 {
			t.Errorf("rebuild after b's return: %+v, want a partial resync of at most 1/8 of a member", r)
		} else {
			step(t, start, "b's members resynced partially: %d regions, %d bytes of %d per member (%.2f%%)",
				r.Regions, r.Bytes, r.MemberBytes, 100*float64(r.Bytes)/float64(r.MemberBytes))
		}
		step(t, start, "b's members are back; scrubbing")
		mustFabraid(t, "volume", "scrub", "v", "--wait")
		in = showVolume(t)
		if lt := in.LastTask; lt == nil || lt.Kind != "scrub" || lt.Error != "" || lt.Scrub == nil || lt.Scrub.Mismatches != 0 {
			t.Fatalf("scrub after b's return: %+v", in.LastTask)
		}
		step(t, start, "scrub clean: %d stripes, 0 mismatches", in.LastTask.Scrub.Stripes)
		g.Signal(t, "healed")
		g.Wait(t, "c", "intact")
		g.Wait(t, "b", "measured")
		attachOwner(t, g, start, in.NQN)
		mustFabraid(t, "cluster", "status")
		step(t, start, "done")
		g.Signal(t, "done")
	case "b":
		verifier(t, g, start)
		g.Wait(t, "a", "done") // powered off meanwhile
	case "c":
		verifier(t, g, start)
		g.Wait(t, "a", "optimal")
		loseNode(t, g, start, "b")
	}
}

// verifier writes this node's region through its consumer device and
// checks the other verifier's.
func verifier(t *testing.T, g *vmtest.Env, start time.Time) {
	g.Wait(t, "a", "created")
	head := waitHead(t, start)
	checkConsumerTLS(t, showVolume(t).NQN)
	other := map[string]string{"b": "c", "c": "b"}[g.Name]
	sum := writeRegion(t, head, regionOf(g.Name), regionBytes, uint64(g.Name[0]))
	if err := os.WriteFile(filepath.Join(g.Shared, "sum-"+g.Name), []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
	step(t, start, "wrote %d bytes at %d through %s: sha256 %s", regionBytes, regionOf(g.Name), head, sum[:16])
	g.Signal(t, "written")
	g.Wait(t, other, "written")
	want, _ := os.ReadFile(filepath.Join(g.Shared, "sum-"+other))
	if got := readRegion(t, head, regionOf(other), regionBytes); got != string(want) {
		t.Fatalf("region of %s read through %s: sha256 %s, %s wrote %s", other, head, got, other, want)
	}
	if got := readRegion(t, head, regionOf(g.Name), regionBytes); got != sum {
		t.Fatalf("own region read back: sha256 %s, wrote %s", got, sum)
	}
	step(t, start, "read %s's region through %s: checksum matches", other, head)
	in := showVolume(t)
	if in.Owner != "a" || in.Device != head {
		t.Fatalf("volume show on %s: owner %q device %q, want a, %s", g.Name, in.Owner, in.Device, head)
	}
	// Engine operations asked on a non-owner are carried out by the owner
	// (TestIntegrationClusterRequests), not refused.
	g.Signal(t, "verified")
}

// loseNode (on c) writes the window continuously while it powers node off,
// waits until the volume is degraded with node's members failed, writes
// the window once more, boots node again and checks every region once the
// owner has healed the volume.
func loseNode(t *testing.T, g *vmtest.Env, start time.Time, node string) {
	head := waitHead(t, start)
	stop := make(chan struct{})
	werr := make(chan error, 1)
	writes := 0
	go func() {
		var err error
		for i := 0; err == nil; i++ {
			select {
			case <-stop:
				werr <- nil
				return
			default:
			}
			off := int64(windowOff + (i%4)*(64<<10))
			_, err = writeAt(head, off, 64<<10, uint64(1000+i))
			writes++
		}
		werr <- err
	}()
	time.Sleep(2 * time.Second)
	step(t, start, "powering %s off under the writer (%d writes so far)", node, writes)
	killed := time.Now()
	g.Kill(t, node)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := osexec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").CombinedOutput()
		var in api.Volume
		if err != nil || json.Unmarshal(b, &in) != nil {
			step(t, start, "volume show: %v %s", err, bytes.TrimSpace(b))
			if time.Now().After(deadline) {
				t.Fatalf("volume show fails 2 min after the power cut of %s", node)
			}
			time.Sleep(time.Second)
			continue
		}
		var failed []string
		for _, m := range in.Members {
			if m.Domain == node && strings.Contains(m.Role, "fail") {
				failed = append(failed, fmt.Sprintf("slot %d %s", m.Slot, m.Failure))
			}
		}
		if in.State == "degraded" && len(failed) == 2 {
			step(t, start, "volume degraded %.1f s after the power cut: %s's members failed: %v", time.Since(killed).Seconds(), node, failed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume not degraded with %s's members failed 2 min after the power cut: %s %+v", node, in.State, in.Members)
		}
		time.Sleep(time.Second)
	}
	close(stop)
	if err := <-werr; err != nil {
		t.Fatalf("write through %s failed while %s was lost: %v", head, node, err)
	}
	step(t, start, "%d writes while %s was powered off, none failed", writes, node)
	sum := writeRegion(t, head, windowOff, windowBytes, 77)
	g.Signal(t, "b-degraded")
	step(t, start, "booting %s again with the same disks", node)
	g.Boot(t, node)
	g.Wait(t, "a", "healed")
	if got := readRegion(t, head, windowOff, windowBytes); got != sum {
		t.Fatalf("window written while %s was away: sha256 %s, wrote %s", node, got, sum)
	}
	for _, n := range []string{"b", "c"} {
		want, _ := os.ReadFile(filepath.Join(g.Shared, "sum-"+n))
		if got := readRegion(t, head, regionOf(n), regionBytes); got != string(want) {
			t.Fatalf("region of %s after %s's return: sha256 %s, want %s", n, node, got, want)
		}
	}
	step(t, start, "every region reads back intact")
	g.Signal(t, "intact")
	attachOther(t, g, start)
	g.Wait(t, "a", "done")
}

// attachOwner (on a, the owner) attaches v to a and b only: its export
// admits two hosts, a's among them, and c drops its head; then to every
// node again, and c's head comes back (attachOther).
func attachOwner(t *testing.T, g *vmtest.Env, start time.Time, nqn string) {
	allowed := func() []string {
		ents, err := os.ReadDir("/sys/kernel/config/nvmet/subsystems/" + nqn + "/allowed_hosts")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	own, err := os.ReadFile("/etc/nvme/hostnqn")
	if err != nil {
		t.Fatal(err)
	}
	before := allowed()
	step(t, start, "volume attach v a b: %s", strings.TrimSpace(mustFabraid(t, "volume", "attach", "v", "a", "b")))
	deadline := time.Now().Add(60 * time.Second)
	for hs := allowed(); len(hs) != 2 || !slices.Contains(hs, strings.TrimSpace(string(own))); hs = allowed() {
		if time.Now().After(deadline) {
			t.Fatalf("export of v admits %v 60 s after attach a b (before: %v), want a's and b's hosts", hs, before)
		}
		time.Sleep(time.Second)
	}
	step(t, start, "export of v admits %d hosts (before: %d)", len(allowed()), len(before))
	g.Signal(t, "attached-ab")
	g.Wait(t, "c", "detached")
	step(t, start, "volume attach v --all: %s", strings.TrimSpace(mustFabraid(t, "volume", "attach", "v", "--all")))
	g.Signal(t, "attached-all")
	g.Wait(t, "c", "reattached")
}

// attachOther is c's part of attachOwner: its head goes, comes back, and
// its region reads back intact through it.
func attachOther(t *testing.T, g *vmtest.Env, start time.Time) {
	g.Wait(t, "a", "attached-ab")
	deadline := time.Now().Add(60 * time.Second)
	for in := showVolume(t); in.Device != "" || in.Attached == nil; in = showVolume(t) {
		if time.Now().After(deadline) {
			t.Fatalf("c 60 s after attach a b: device %q, attached %+v; want no device", in.Device, in.Attached)
		}
		time.Sleep(time.Second)
	}
	step(t, start, "c detached: no consumer device of v")
	g.Signal(t, "detached")
	g.Wait(t, "a", "attached-all")
	head := waitHead(t, start)
	want, _ := os.ReadFile(filepath.Join(g.Shared, "sum-c"))
	if got := readRegion(t, head, regionOf("c"), regionBytes); got != string(want) {
		t.Fatalf("c's region through %s after attach --all: sha256 %s, want %s", head, got, want)
	}
	step(t, start, "c attached again: %s, its region intact", head)
	g.Signal(t, "reattached")
}

// returnedNode is a node's boot after its power cut: fabraidd starts from
// the state disk (no claim, no join), the owner re-adds its members; it
// measures what the resync wrote to its member drives.
func returnedNode(t *testing.T, g *vmtest.Env, start time.Time) {
	step(t, start, "boot %d: starting fabraidd from the state disk", g.BootNum)
	before := sectorsWritten(t, g.Disks[:2])
	startDaemonClaiming(t, g, nil)
	g.Signal(t, "back")
	g.Wait(t, "a", "healed")
	after := sectorsWritten(t, g.Disks[:2])
	for i, d := range g.Disks[:2] {
		n := (after[i] - before[i]) * 512
		step(t, start, "resync wrote %d bytes to member %s (%.2f%% of %d)", n, d, 100*float64(n)/memberBytes, memberBytes)
		if n <= 0 || n > memberBytes/8 {
			t.Errorf("member %s: %d bytes written by the resync, want > 0 and at most 1/8 of the member (%d)", d, n, memberBytes/8)
		}
	}
	g.Signal(t, "measured")
	g.Wait(t, "a", "done")
}

// sectorsWritten reads the sectors written of each disk (/sys/block/X/stat).
func sectorsWritten(t *testing.T, disks []string) []int64 {
	t.Helper()
	var out []int64
	for _, d := range disks {
		b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d), "stat"))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		n, _ := strconv.ParseInt(f[6], 10, 64)
		out = append(out, n)
	}
	return out
}

// mountState puts state_dir (/var/lib/fabraid) and the NVMe host identity
// (/etc/nvme) on the guest's third disk, formatted on the first boot, so
// a node powered off and booted again comes back as itself.
func mountState(t *testing.T, g *vmtest.Env) {
	t.Helper()
	dev := g.Disks[2]
	if g.BootNum == 1 {
		if out, err := osexec.Command("mke2fs", "-q", dev).CombinedOutput(); err != nil {
			t.Fatalf("mke2fs %s: %v %s", dev, err, out)
		}
	}
	if err := os.MkdirAll("/var/lib/fabraid", 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := osexec.Command("mount", "-t", "ext4", dev, "/var/lib/fabraid").CombinedOutput(); err != nil {
		fs, _ := os.ReadFile("/proc/filesystems")
		ls, _ := osexec.Command("ls", "-l", "/dev/", "/var/lib").CombinedOutput()
		t.Fatalf("mount %s: %v %s\n%s\n%s", dev, err, out, fs, ls)
	}
	os.MkdirAll("/var/lib/fabraid/nvme", 0o755)
	os.RemoveAll("/etc/nvme")
	if err := os.Symlink("/var/lib/fabraid/nvme", "/etc/nvme"); err != nil {
		t.Fatal(err)
	}
}

// formCluster starts fabraidd (claiming the two member disks) and makes
// the cluster: init on a, join b then c.
func formCluster(t *testing.T, g *vmtest.Env, start time.Time) {
	tokFile := func(n string) string { return filepath.Join(g.Shared, "token-"+n) }
	switch g.Name {
	case "a":
		startDaemonClaiming(t, g, g.Disks[:2])
		mustFabraid(t, "cluster", "init", "--name", "vmtest")
		for _, n := range []string{"b", "c"} {
			tok := mustFabraid(t, "cluster", "token", "--ttl", "10m")
			if err := os.WriteFile(tokFile(n), []byte(tok), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		step(t, start, "cluster initialized on a")
		g.Signal(t, "init")
	case "b":
		g.Wait(t, "a", "init")
		startDaemonClaiming(t, g, g.Disks[:2])
		tok, _ := os.ReadFile(tokFile("b"))
		mustFabraid(t, "cluster", "join", g.Addr("a"), "--token", string(tok))
		step(t, start, "b joined")
		g.Signal(t, "joined")
	case "c":
		g.Wait(t, "b", "joined")
		startDaemonClaiming(t, g, g.Disks[:2])
		tok, _ := os.ReadFile(tokFile("c"))
		mustFabraid(t, "cluster", "join", g.Addr("a"), "--token", string(tok))
		step(t, start, "c joined")
		g.Signal(t, "joined")
	}
}

func showVolume(t *testing.T) api.Volume {
	t.Helper()
	var in api.Volume
	if err := json.Unmarshal([]byte(mustFabraid(t, "volume", "show", "v", "--json")), &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// waitState polls the volume on this node until its state is want,
// logging every change (state, members not active).
func waitState(t *testing.T, start time.Time, want string, timeout time.Duration) api.Volume {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		b, err := osexec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
		var in api.Volume
		if err == nil && json.Unmarshal(b, &in) == nil {
			var off []string
			for _, m := range in.Members {
				if m.Role != "active" {
					off = append(off, fmt.Sprintf("%d(%s %s %s)", m.Slot, m.Domain, m.Role, m.Failure))
				}
			}
			now := fmt.Sprintf("%s %v %s", in.State, off, in.Error)
			if now != last {
				step(t, start, "volume v: %s", now)
				last = now
			}
			if in.State == want {
				return in
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume v not %s after %s: %s (%v)", want, timeout, last, err)
		}
		time.Sleep(time.Second)
	}
}

// waitHead waits until this node has the volume's consumer device.
func waitHead(t *testing.T, start time.Time) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, err := osexec.Command("/usr/bin/fabraid", "volume", "show", "v", "--json").Output()
		out := string(b)
		var in api.Volume
		if err == nil && json.Unmarshal([]byte(out), &in) == nil && in.Device != "" {
			step(t, start, "consumer device %s (state %s)", in.Device, in.State)
			return in.Device
		}
		if time.Now().After(deadline) {
			t.Fatalf("no consumer device of v after 90 s: %v %s", err, out)
		}
		time.Sleep(time.Second)
	}
}

// alignedBuf is n bytes aligned for O_DIRECT.
func alignedBuf(t *testing.T, n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeAt writes n bytes of seeded data at off with O_DIRECT and fsync
// and returns their SHA-256.
func writeAt(dev string, off int64, n int, seed uint64) (string, error) {
	f, err := os.OpenFile(dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return "", err
	}
	defer unix.Munmap(buf)
	r := rand.New(rand.NewPCG(seed, 42))
	for i := 0; i+8 <= len(buf); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			buf[i+j] = byte(v >> (8 * j))
		}
	}
	if _, err := f.WriteAt(buf, off); err != nil {
		return "", fmt.Errorf("write %s at %d: %w", dev, off, err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("fsync %s: %w", dev, err)
	}
	s := sha256.Sum256(buf)
	return hex.EncodeToString(s[:]), nil
}

// writeRegion is writeAt, failing the test on an error.
func writeRegion(t *testing.T, dev string, off int64, n int, seed uint64) string {
	t.Helper()
	sum, err := writeAt(dev, off, n, seed)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// readRegion reads n bytes at off with O_DIRECT and returns the SHA-256.
func readRegion(t *testing.T, dev string, off int64, n int) string {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := alignedBuf(t, n)
	if _, err := f.ReadAt(buf, off); err != nil {
		t.Fatalf("read %s at %d: %v", dev, off, err)
	}
	if bytes.Count(buf, []byte{0}) == len(buf) {
		t.Logf("%d bytes at %d of %s read as zeroes", n, off, dev)
	}
	s := sha256.Sum256(buf)
	return hex.EncodeToString(s[:])
}
