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
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
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
