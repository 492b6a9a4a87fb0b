//go:build linux

package importer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/importer"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
	pnvmet "github.com/fabraid/fabraid/plugins/nvmet"
)

// The TLS phase of TestIntegrationDriveExportImport (nvme_tls =
// required on the member path, between guests a and c on 6.12, each
// with trixie's tlshd): a exports its drives to c with TLS-required
// ports and the pair keys it derives from c's secret
// (exporter.Input.TLS); c's plain connect is refused, a connect with a
// wrong PSK under the pair's identity is refused (the kernel's and
// tlshd's messages are logged: the reason), and the importer connects
// with TLS and the key it derives from its own secret: the controller
// uses that key (sysfs tls_key), and 1 MiB written through it is on a's
// disk. Each side's pair keys are live while used and not after: a's
// after its unexport, c's after the importer drops the member.

// tlsOffset is where c writes through TLS and a looks on its disk.
const tlsOffset = 8 << 20

// tlsExportSide is a's part, after the volume's exports are gone.
func tlsExportSide(t *testing.T, g *vmtest.Env, reconcile func(exporter.Input) exporter.Result) {
	vmtest.StartTLSHD(t)
	g.Signal(t, "unexported")
	g.Wait(t, "c", "disconnected")
	in := volumeInput(g, hostC, keyC)
	in.TLS = fabrictls.PortsRequired
	res := reconcile(in)
	for _, e := range res.Exports {
		if !e.TLS {
			t.Fatalf("export %s without TLS", e.NQN)
		}
	}
	port := filepath.Join(nvmet.DefaultRoot, "ports", strconv.Itoa(exporter.PortBase))
	for attr, want := range map[string]string{"addr_tsas": "tls1.3", "addr_treq": "required"} {
		if b, err := os.ReadFile(filepath.Join(port, attr)); err != nil || !strings.HasPrefix(strings.TrimSpace(string(b)), want) {
			t.Fatalf("port %d %s = %q (%v), want %s", exporter.PortBase, attr, b, err, want)
		}
	}
	pairKeysIn(t, res.Exports, true)
	t.Logf("drive port %d: addr_tsas tls1.3, addr_treq required; %d pair keys in .nvme", exporter.PortBase, len(res.Exports))
	g.Signal(t, "tls-exported")
	g.Wait(t, "c", "tls-written")
	if err := readPattern(g.Disks[0], tlsOffset); err != nil {
		t.Fatalf("what c wrote through TLS is not on a's disk: %v", err)
	}
	t.Logf("1 MiB c wrote through TLS is on %s at %d", g.Disks[0], tlsOffset)
	in.Volumes = nil
	reconcile(in)
	pairKeysIn(t, res.Exports, false)
	t.Logf("after the unexport: none of the %d pair keys in .nvme", len(res.Exports))
}

// pairKeysIn checks that the kernel's keyring holds (want) or no longer
// holds the pair key of c and each export's drive, by identity: a's
// exporter's key on a, c's importer's on c.
func pairKeysIn(t *testing.T, exports []exporter.Export, want bool) {
	t.Helper()
	ids, err := fabrictls.KernelKeys{}.Identities()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exports {
		k, err := fabrictls.PairKey(nvmf.SecretText(keyC), hostC.NQN, e.NQN)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ids, k.Identity) != want {
			t.Errorf("pair key %s in .nvme: %v, want %v (psk keys: %q)", k.Identity, !want, want, ids)
		}
	}
}

// tlsImportSide is c's part, after it served as the new owner.
func tlsImportSide(t *testing.T, g *vmtest.Env, ctx context.Context) {
	vmtest.StartTLSHD(t)
	seen := map[string]bool{}
	logKernel(t, seen, "before") // what the earlier phases left
	g.Wait(t, "a", "unexported")
	h := nvmf.NewHost()
	cs, err := h.Sysfs.Controllers()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if err := h.Disconnect(c.Name); err != nil {
			t.Fatal(err)
		}
	}
	g.Signal(t, "disconnected")
	g.Wait(t, "a", "tls-exported")

	// Plain: refused by the port.
	in := importer.Input{Identity: hostC, Secret: nvmf.SecretText(keyC), Remotes: remotes(g)[:1]}
	start := time.Now()
	if res, err := importer.New().Reconcile(ctx, in); err != nil || len(res.Problems) == 0 || len(res.Devices) != 0 {
		t.Fatalf("plain connect to a TLS-required port: devices %v problems %v err %v", res.Devices, res.Problems, err)
	} else {
		t.Logf("plain connect refused in %.2f s: %v", time.Since(start).Seconds(), res.Problems)
	}
	logKernel(t, seen, "plain")

	// A wrong PSK under the pair's identity, in a keyring of its own.
	right, err := fabrictls.PairKey(nvmf.SecretText(keyC), hostC.NQN, exporter.NQN(drivesA[0]))
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := fabrictls.PairKey(nvmf.SecretText(wrongKey), hostC.NQN, exporter.NQN(drivesA[0]))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := nvmetls.NewKeyring("fabraid-test-wrong")
	if err != nil {
		t.Fatal(err)
	}
	wrongID, err := nvmetls.Insert(ring, wrong)
	if err != nil {
		t.Fatal(err)
	}
	o := nvmf.Options{Transport: nvmf.TCP, Address: g.Addr("a"), ServiceID: exporter.DefaultServiceID, NQN: exporter.NQN(drivesA[0]),
		HostNQN: hostC.NQN, HostID: hostC.ID, DHCHAPSecret: keyC, TLS: true, Keyring: ring}
	start = time.Now()
	if c, err := h.Connect(o); err == nil {
		h.Disconnect(c.Name)
		t.Fatal("connected with a wrong PSK")
	} else {
		t.Logf("wrong PSK (%v) refused in %.2f s: %v", wrong, time.Since(start).Seconds(), err)
	}
	logKernel(t, seen, "wrong PSK")

	// The importer with TLS: its pair key into .nvme, then the connect.
	in.Remotes[0].TLS = true
	res := importOK(t, ctx, importer.New(), in)
	logKernel(t, seen, "TLS")
	if len(res.Devices) != 1 {
		t.Fatalf("imported %+v, want one drive", res.Devices)
	}
	cs, err = h.Sysfs.Controllers()
	if err != nil || len(cs) != 1 {
		t.Fatalf("controllers %+v: %v", cs, err)
	}
	serial := keySerial(t, right.Identity, wrongID)
	tk, err := os.ReadFile(filepath.Join("/sys/class/nvme", cs[0].Name, "tls_key"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.ParseInt(strings.TrimSpace(string(tk)), 16, 64); int(got) != serial {
		t.Fatalf("%s uses TLS key %s, want the pair key %x (%s)", cs[0].Name, tk, serial, right.Identity)
	}
	t.Logf("%s: TLS with key %x, %v", cs[0].Name, serial, right)
	if err := writeRead(res.Devices[0].Path, tlsOffset); err != nil {
		t.Fatal(err)
	}
	g.Signal(t, "tls-written")
	dropTLSMember(t, ctx, ring, wrongID, exporter.NQN(drivesA[0]))
}

// dropTLSMember checks that the importer's pair key for the drive nqn is
// live while its controller is, then has the importer drop the member (a
// pass without it) and checks that neither a controller nor a live key
// of the pair is left in .nvme, while the test's wrong key, which shares
// the pair's identity in a keyring of its own, is still live (the
// importer revokes only .nvme's keys); then revokes that one.
func dropTLSMember(t *testing.T, ctx context.Context, ring, wrongID int, nqn string) {
	t.Helper()
	pair := []exporter.Export{{NQN: nqn}}
	pairKeysIn(t, pair, true)
	importOK(t, ctx, importer.New(), importer.Input{Identity: hostC, Secret: nvmf.SecretText(keyC)})
	if cs, err := nvmf.NewHost().Sysfs.Controllers(); err != nil || len(cs) != 0 {
		t.Fatalf("controllers after the member is dropped: %+v (%v)", cs, err)
	}
	if pairKeysIn(t, pair, false); !t.Failed() {
		t.Logf("importer dropped %s: no controller, its pair key not live in .nvme", nqn)
	}
	if !keyLive(t, wrongID) {
		t.Errorf("the psk %x in keyring %x (not .nvme) with the pair's identity was revoked with the pair key", wrongID, ring)
	} else {
		t.Logf("the psk %x with the pair's identity in keyring %x is still live", wrongID, ring)
	}
	if err := nvmetls.RevokePossessed(ring, wrongID); err != nil {
		t.Fatal(err)
	}
}

// keyLive says whether /proc/keys lists the key id as live.
func keyLive(t *testing.T, id int) bool {
	t.Helper()
	keys, err := nvmetls.ProcKeys()
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(keys, func(k nvmetls.ProcKey) bool { return k.ID == id && k.Live() })
}

// keySerial is the serial of the one psk key with the identity that is
// not the wrong one (not).
func keySerial(t *testing.T, identity string, not int) int {
	t.Helper()
	f, err := os.Open("/proc/keys")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys, err := nvmetls.ParseProcKeys(f)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, k := range keys {
		if k.Type == "psk" && k.Description == identity && k.ID != not {
			ids = append(ids, k.ID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("psk keys %q in /proc/keys besides the wrong one: %x, want one", identity, ids)
	}
	return ids[0]
}

// readPattern checks writeRead's 1 MiB at off of path (O_DIRECT: what
// the disk holds, not a cached page).
func readPattern(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := alignedBuf(1 << 20)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	for i := range b {
		if b[i] != byte(i^0x5a) {
			return fmt.Errorf("%s: byte %d at %d differs", path, i, off)
		}
	}
	return nil
}

// logKernel logs the kernel's NVMe, TLS and handshake lines not logged
// before (seen).
func logKernel(t *testing.T, seen map[string]bool, when string) {
	t.Helper()
	for _, l := range kernelLogLines(t, "") {
		if seen[l] {
			continue
		}
		seen[l] = true
		if ll := strings.ToLower(l); strings.Contains(ll, "nvme") || strings.Contains(ll, "tls") || strings.Contains(ll, "handshake") {
			t.Logf("kernel (%s): %s", when, l)
		}
	}
}

// The volume-path phase of TestIntegrationDriveExportImport (nvme_tls on
// the volume paths, between a and c, after the member-path TLS phase and
// with its tlshd): a exports its second disk as a volume the way a
// volume's owner does (volmgr.ClusterExportSpec, WithTLS, ExportKeys
// into .nvme, applied by the kernel nvmet backend on the volume port),
// and c consumes it as a consumer does (volmgr.ConsumerConnections with
// Consumer.TLS, ConsumerKeys into .nvme):
//   - ports "optional" (nvme_tls = on): c connects plain, then with TLS;
//     the TLS controller uses the pair key (sysfs tls_key), 1 MiB written
//     through the head is on a's disk, and a sequential 1 MiB-block
//     write and read through the head is timed both ways (VMBENCH
//     "volume_path_tls", printed, never asserted);
//   - ports "required" (nvme_tls = required): c's plain connect is
//     refused, the kernel's messages logged.

// The volume a exports, and where on a's disk c writes what a checks.
var (
	volTLSUUID   = [16]byte{0xfa, 0xb7, 0x15, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1}
	volTLSOffset = int64(24 << 20)
)

// volBenchBytes is what each timed pass writes and reads (at offset 0).
const volBenchBytes = 16 << 20

// volTLSExportSide is a's part, after tlsExportSide (tlshd runs).
func volTLSExportSide(t *testing.T, g *vmtest.Env) {
	ctx := context.Background()
	b := &pnvmet.Backend{Root: nvmet.DefaultRoot, SysModule: "/sys/module"}
	hosts := []volmgr.ExportHost{{NQN: hostC.NQN, Secret: nvmf.SecretText(keyC)}}
	apply := func(ports string) {
		t.Helper()
		spec := volmgr.ClusterExportSpec([]volmgr.Export{{UUID: volTLSUUID, Device: g.Disks[1]}}, hosts, true, []string{g.Addr("a")}, 0)
		spec = volmgr.WithTLS(spec, ports)
		keys, err := volmgr.ExportKeys(spec, hosts, ports)
		if err == nil {
			err = fabrictls.InsertKeys(fabrictls.KernelKeys{}, keys)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: volid.NQNPrefix, Exports: spec}); err != nil {
			t.Fatalf("volume export, ports %q: %v", ports, err)
		}
		port := filepath.Join(nvmet.DefaultRoot, "ports", strconv.Itoa(volmgr.ExportPortID))
		for attr, want := range map[string]string{"addr_tsas": "tls1.3", "addr_treq": map[string]string{fabrictls.PortsRequired: "required", fabrictls.PortsOptional: "not required"}[ports]} {
			if got, err := os.ReadFile(filepath.Join(port, attr)); err != nil || !strings.HasPrefix(strings.TrimSpace(string(got)), want) {
				t.Fatalf("volume port %s = %q (%v), want %s", attr, got, err, want)
			}
		}
		t.Logf("volume port %d: addr_tsas tls1.3, addr_treq %s; %d pair key(s) in .nvme", volmgr.ExportPortID, map[string]string{fabrictls.PortsRequired: "required", fabrictls.PortsOptional: "not required"}[ports], len(keys))
	}
	g.Wait(t, "c", "tls-written")
	apply(fabrictls.PortsOptional)
	g.Signal(t, "vol-optional")
	g.Wait(t, "c", "vol-measured")
	if err := readPattern(g.Disks[1], volTLSOffset); err != nil {
		t.Fatalf("what c wrote through the volume's head over TLS is not on a's disk: %v", err)
	}
	t.Logf("1 MiB c wrote through the volume's head over TLS is on %s at %d", g.Disks[1], volTLSOffset)
	apply(fabrictls.PortsRequired)
	g.Signal(t, "vol-required")
	g.Wait(t, "c", "vol-refused")
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: volid.NQNPrefix}); err != nil {
		t.Fatal(err)
	}
}

// volTLSConsumerSide is c's part, after tlsImportSide (tlshd runs).
func volTLSConsumerSide(t *testing.T, g *vmtest.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	h := nvmf.NewHost()
	seen := map[string]bool{}
	logKernel(t, seen, "before the volume path")
	g.Wait(t, "a", "vol-optional")
	plain := consumeVolume(t, ctx, h, g, false)
	tls := consumeVolume(t, ctx, h, g, true)
	logKernel(t, seen, "volume path")
	fmt.Printf("VMBENCH {\"name\":\"volume_path_tls\",\"block_bytes\":%d,\"bytes\":%d,\"plain_write_mib_s\":%.1f,\"tls_write_mib_s\":%.1f,\"plain_read_mib_s\":%.1f,\"tls_read_mib_s\":%.1f,\"kernel\":\"6.12\",\"tcg\":true}\n",
		1<<20, volBenchBytes, plain[0], tls[0], plain[1], tls[1])
	g.Signal(t, "vol-measured")

	g.Wait(t, "a", "vol-required")
	o := volumeConnection(t, g, false)
	start := time.Now()
	if c, err := h.Connect(o); err == nil {
		h.Disconnect(c.Name)
		t.Fatal("plain connect to a TLS-required volume port succeeded")
	} else {
		t.Logf("plain connect to the TLS-required volume port refused in %.2f s: %v", time.Since(start).Seconds(), err)
	}
	logKernel(t, seen, "plain to required")
	g.Signal(t, "vol-refused")
}

// volumeConnection is c's connection to a's volume export, as a consumer
// makes it (volmgr.ConsumerConnections), its pair key in .nvme with tls.
func volumeConnection(t *testing.T, g *vmtest.Env, tls bool) nvmf.Options {
	t.Helper()
	desired, err := volmgr.ConsumerConnections([]volmgr.Consumer{{UUID: volTLSUUID, Addresses: []string{g.Addr("a")}, TLS: tls}}, hostC, nvmf.SecretText(keyC))
	if err != nil || len(desired) != 1 || desired[0].TLS != tls {
		t.Fatalf("consumer connections %+v: %v", desired, err)
	}
	keys, err := volmgr.ConsumerKeys(desired, nvmf.SecretText(keyC))
	if err == nil {
		err = fabrictls.InsertKeys(fabrictls.KernelKeys{}, keys)
	}
	if err != nil {
		t.Fatal(err)
	}
	return desired[0]
}

// consumeVolume connects c to the volume (TLS or not), checks the
// controller's tls_key, writes and reads through the head, times a
// sequential pass and disconnects; it returns write and read MiB/s.
func consumeVolume(t *testing.T, ctx context.Context, h *nvmf.Host, g *vmtest.Env, tls bool) [2]float64 {
	t.Helper()
	c, err := h.Connect(volumeConnection(t, g, tls))
	if err != nil {
		t.Fatalf("connect to the volume (TLS %v): %v", tls, err)
	}
	defer h.Disconnect(c.Name)
	c, err = h.WaitPaths(ctx, c.Name, 1)
	if err != nil || c.Paths[0].Head == "" {
		t.Fatalf("volume head (TLS %v): %+v %v", tls, c, err)
	}
	head := "/dev/" + c.Paths[0].Head
	tk, _ := os.ReadFile(filepath.Join("/sys/class/nvme", c.Name, "tls_key"))
	key := strings.TrimSpace(string(tk))
	if tls {
		k, err := fabrictls.PairKey(nvmf.SecretText(keyC), hostC.NQN, volid.NQN(volTLSUUID))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := strconv.ParseInt(key, 16, 64); int(got) != keySerial(t, k.Identity, 0) {
			t.Fatalf("%s uses TLS key %q, want the pair key of %s", c.Name, key, k.Identity)
		}
		if err := writeRead(head, volTLSOffset); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (head %s): TLS with the pair key %s (%v); 1 MiB written and read back at %d", c.Name, head, key, k, volTLSOffset)
	} else {
		if key != "" && key != "0" {
			t.Fatalf("%s: plain connect has tls_key %q", c.Name, key)
		}
		t.Logf("%s (head %s): plain", c.Name, head)
	}
	return seqMiBs(t, head)
}

// seqMiBs writes then reads volBenchBytes at offset 0 of dev in 1 MiB
// O_DIRECT blocks and returns the write and read rates in MiB/s.
func seqMiBs(t *testing.T, dev string) [2]float64 {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := alignedBuf(1 << 20)
	for i := range buf {
		buf[i] = byte(i)
	}
	var out [2]float64
	for i, op := range []func([]byte, int64) (int, error){f.WriteAt, f.ReadAt} {
		start := time.Now()
		for off := int64(0); off < volBenchBytes; off += 1 << 20 {
			if _, err := op(buf, off); err != nil {
				t.Fatalf("%s at %d: %v", dev, off, err)
			}
		}
		if i == 0 {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		out[i] = float64(volBenchBytes) / (1 << 20) / time.Since(start).Seconds()
	}
	return out
}
