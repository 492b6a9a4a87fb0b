package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseFull(t *testing.T) {
	in := `# comment
node_name = node1
storage_interfaces = eth1, eth2
storage_cidrs = 10.10.1.7/16,fd00::/64

state_dir = /var/lib/fab/
api_socket = /run/fab/api.sock
metrics_address = :9500
export_address = 10.10.0.1
export_port = 4421
engine_mode = systemd
nsd_discovery = exclusive
assembly_timeout = 5
`
	c, err := Parse(strings.NewReader(in), "t.conf")
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "node1" || len(c.StorageInterfaces) != 2 || c.StorageInterfaces[1] != "eth2" ||
		len(c.StorageCIDRs) != 2 || c.StorageCIDRs[0].String() != "10.10.0.0/16" ||
		c.StateDir != "/var/lib/fab" || c.APISocket != "/run/fab/api.sock" || c.MetricsAddress != ":9500" ||
		c.ExportAddress != "10.10.0.1" || c.ExportPort != 4421 || c.EngineMode != EngineSystemd ||
		c.NSDDiscovery != NSDExclusive || c.AssemblyTimeout != 5*time.Second {
		t.Fatalf("got %+v", c)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse(strings.NewReader(""), "t.conf")
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if c.StateDir != d.StateDir || c.APISocket != d.APISocket || c.ExportPort != 4420 || c.NodeName == "" || c.EngineMode != EngineAuto ||
		c.NSDDiscovery != NSDMerge || c.AssemblyTimeout != 30*time.Second || !c.UdevProbe {
		t.Fatalf("got %+v", c)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"node_name", "t.conf:1: want key = value"},
		{"bogus = 1\nexport_port = x", "t.conf:2: export_port:"}, // an unknown key does not hide a bad value
		{"bogus = 1\nbogus = 2", "t.conf:2: bogus: repeated"},
		{"node_name = a\nnode_name = b", "t.conf:2: node_name: repeated (first set on line 1)"},
		{"node_name = -bad", "t.conf:1: node_name: \"-bad\""},
		{"storage_cidrs = 10.0.0.0", "t.conf:1: storage_cidrs: \"10.0.0.0\" is not a CIDR"},
		{"state_dir = relative", "t.conf:1: state_dir: \"relative\": want an absolute path"},
		{"api_socket = sock", "t.conf:1: api_socket:"},
		{"metrics_address = 9436", "t.conf:1: metrics_address:"},
		{"export_address = localhost", "t.conf:1: export_address:"},
		{"export_port = 70000", "t.conf:1: export_port: \"70000\": want a TCP port"},
		{"storage_interfaces = eth/0", "t.conf:1: storage_interfaces:"},
		{"\n\nengine_mode = docker", "t.conf:3: engine_mode: \"docker\": want auto, systemd or process"},
		{"nsd_discovery = only", "t.conf:1: nsd_discovery: \"only\": want merge"},
		{"engine_mode =", "t.conf:1: engine_mode: \"\": want auto"},
		{"assembly_timeout = 0", "t.conf:1: assembly_timeout: \"0\": want seconds, 1..3600"},
		{"assembly_timeout = 30s", "t.conf:1: assembly_timeout: \"30s\": want seconds"},
		{"udev_probe = 0", "t.conf:1: udev_probe: \"0\": want true or false"},
		{"ublk_zero_copy = on", "t.conf:1: ublk_zero_copy: \"on\": want auto (zero-copy reads where the kernel's ublk offers them) or off"},
	} {
		_, err := Parse(strings.NewReader(tc.in), "t.conf")
		var ce *Error
		if err == nil || !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want prefix %q", tc.in, err, tc.want)
		}
	}
}

// TestParseUnknownKeys: a key this version does not know (one of a newer
// release after a downgrade, or one removed by an upgrade) is a warning
// naming the file, line and key, and the known keys still apply, so the
// daemon starts.
func TestParseUnknownKeys(t *testing.T) {
	c, err := Parse(strings.NewReader("# a newer release's file\nnode_name = n1\nfuture_key = 7\n\nexport_port = 4421\nold_key=x\n"), "t.conf")
	if err != nil {
		t.Fatalf("unknown keys stopped the parse: %v", err)
	}
	if c.NodeName != "n1" || c.ExportPort != 4421 {
		t.Errorf("known keys not applied: %+v", c)
	}
	var got []string
	for _, w := range c.Warnings {
		if !errors.Is(w, ErrUnknownKey) {
			t.Errorf("warning %v is not ErrUnknownKey", w)
		}
		got = append(got, w.Error())
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "t.conf:3: future_key: unknown key, ignored (known: node_name,") ||
		!strings.HasPrefix(got[1], "t.conf:6: old_key: unknown key, ignored") {
		t.Errorf("warnings %q", got)
	}
	if c, err := Parse(strings.NewReader("node_name = n1\n"), "t.conf"); err != nil || c.Warnings != nil {
		t.Errorf("known keys only: warnings %v, %v", c.Warnings, err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fabraid.conf")
	if _, err := Load(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load missing: %v", err)
	}
	if c, err := LoadOrDefault(p); err != nil || c.StateDir != Default().StateDir {
		t.Fatalf("LoadOrDefault missing: %+v %v", c, err)
	}
	os.WriteFile(p, []byte("export_port = x\n"), 0o644)
	if _, err := LoadOrDefault(p); err == nil || !strings.Contains(err.Error(), p+":1: export_port") {
		t.Fatalf("LoadOrDefault bad: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("node_name = a\nexport_port = 1\n")
	f.Add("# x\nstorage_cidrs = 1.2.3.4/8, ::/0")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(strings.NewReader(s), "f")
		if err == nil && (c.StateDir == "" || c.ExportPort < 1) {
			t.Fatalf("accepted %q into %+v", s, c)
		}
	})
}

func TestParseUdevProbe(t *testing.T) {
	for in, want := range map[string]bool{"udev_probe = false\n": false, "udev_probe = true\n": true} {
		if c, err := Parse(strings.NewReader(in), "t.conf"); err != nil || c.UdevProbe != want {
			t.Errorf("%q: UdevProbe %v, %v", in, c.UdevProbe, err)
		}
	}
}

// Lookup finds a key without parsing the rest of the file.
func TestLookup(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fabraid.conf")
	if v, found, err := Lookup(p, "udev_probe"); v != "" || found || err != nil {
		t.Fatalf("missing file: %q %v %v", v, found, err)
	}
	os.WriteFile(p, []byte("bogus key\n# udev_probe = true\n  udev_probe =  false \nnode_name = a\n"), 0o644)
	if v, found, err := Lookup(p, "udev_probe"); v != "false" || !found || err != nil {
		t.Fatalf("got %q %v %v", v, found, err)
	}
	if v, found, err := Lookup(p, "state_dir"); v != "" || found || err != nil {
		t.Fatalf("absent key: %q %v %v", v, found, err)
	}
}

func TestParseEngineMode(t *testing.T) {
	for _, m := range []string{EngineAuto, EngineSystemd, EngineProcess} {
		c, err := Parse(strings.NewReader("engine_mode = "+m+"\n"), "t.conf")
		if err != nil || c.EngineMode != m {
			t.Errorf("engine_mode = %s: %q %v", m, c.EngineMode, err)
		}
	}
}

func TestParseUblkZeroCopy(t *testing.T) {
	if c, err := Parse(strings.NewReader(""), "t.conf"); err != nil || c.UblkZeroCopy != ZeroCopyAuto {
		t.Errorf("default: %q %v, want auto", c.UblkZeroCopy, err)
	}
	for _, m := range []string{ZeroCopyAuto, ZeroCopyOff} {
		c, err := Parse(strings.NewReader("ublk_zero_copy = "+m+"\n"), "t.conf")
		if err != nil || c.UblkZeroCopy != m {
			t.Errorf("ublk_zero_copy = %s: %q %v", m, c.UblkZeroCopy, err)
		}
	}
}

func TestParseTargetBackend(t *testing.T) {
	c, err := Parse(strings.NewReader(""), "t.conf")
	if err != nil || c.TargetBackend != BackendNvmet || c.SPDKSocket != "/var/tmp/spdk.sock" {
		t.Fatalf("defaults: %q %q %v", c.TargetBackend, c.SPDKSocket, err)
	}
	c, err = Parse(strings.NewReader("target_backend = spdk\nspdk_rpc_socket = /run/spdk/rpc.sock\n"), "t.conf")
	if err != nil || c.TargetBackend != BackendSPDK || c.SPDKSocket != "/run/spdk/rpc.sock" {
		t.Fatalf("spdk: %q %q %v", c.TargetBackend, c.SPDKSocket, err)
	}
	if c, err = Parse(strings.NewReader("target_backend = nvmet-plugin\n"), "t.conf"); err != nil || c.TargetBackend != BackendNvmetPlugin {
		t.Fatalf("nvmet-plugin: %q %v", c.TargetBackend, err)
	}
	for _, bad := range []string{"target_backend = lio\n", "spdk_rpc_socket = spdk.sock\n"} {
		if _, err := Parse(strings.NewReader(bad), "t.conf"); err == nil || !strings.Contains(err.Error(), "t.conf:1") {
			t.Errorf("%q: error %v, want one naming t.conf:1", bad, err)
		}
	}
}

func TestParseCluster(t *testing.T) {
	in := `cluster_address = 10.10.0.1
failure_domain = rack3
etcd_peer_port = 12380
etcd_client_port = 12379
join_port = 19437
etcd_members = 5
node_lease_ttl = 20
owner_lease_ttl = 10
etcd_heartbeat_ms = 250
etcd_election_ms = 2500
down_out_interval = 0
nvme_tls = required
`
	c, err := Parse(strings.NewReader(in), "t.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{Address: "10.10.0.1", Domain: "rack3", PeerPort: 12380, ClientPort: 12379, JoinPort: 19437, Members: 5, LeaseTTL: 20, OwnerLeaseTTL: 10, HeartbeatMs: 250, ElectionMs: 2500, RequireAuth: true, NVMeTLS: "required"}
	if fmt.Sprint(c.Cluster) != fmt.Sprint(want) {
		t.Fatalf("got %+v, want %+v", c.Cluster, want)
	}
	ext, err := Parse(strings.NewReader("etcd_endpoints = https://e1:2379, https://e2:2379\netcd_ca_file = /etc/e/ca\netcd_cert_file = /etc/e/c\netcd_key_file = /etc/e/k\n"), "t.conf")
	if err != nil || len(ext.Cluster.Endpoints) != 2 || ext.Cluster.KeyFile != "/etc/e/k" {
		t.Fatalf("external: %+v %v", ext.Cluster, err)
	}
	if d := Default().Cluster; d.PeerPort != 2380 || d.ClientPort != 2379 || d.JoinPort != 9437 || d.Members != 3 || d.LeaseTTL != 10 || d.OwnerLeaseTTL != 6 || d.HeartbeatMs != 100 || d.ElectionMs != 1000 || d.DownOutInterval != 600 {
		t.Fatalf("defaults %+v", d)
	}
	for _, tc := range []struct{ in, want string }{
		{"cluster_address = node1", "t.conf:1: cluster_address: \"node1\" is not a unicast IP"},
		{"cluster_address = 0.0.0.0", "t.conf:1: cluster_address:"},
		{"\nfailure_domain = a/b", "t.conf:2: failure_domain:"},
		{"etcd_members = 2", "t.conf:1: etcd_members: \"2\": want 1, 3 or 5"},
		{"join_port = 0", "t.conf:1: join_port: \"0\": want a TCP port"},
		{"etcd_client_port = x", "t.conf:1: etcd_client_port:"},
		{"node_lease_ttl = 1", "t.conf:1: node_lease_ttl: \"1\": want seconds, 2..300"},
		{"owner_lease_ttl = 61", "t.conf:1: owner_lease_ttl: \"61\": want seconds, 2..60"},
		{"etcd_heartbeat_ms = 5", "t.conf:1: etcd_heartbeat_ms: \"5\": want milliseconds"},
		{"etcd_heartbeat_ms = 300", "t.conf:1: etcd_election_ms: 1000 ms with a heartbeat of 300 ms: want at least 5 heartbeats"},
		{"\netcd_election_ms = 6000", "t.conf:2: owner_lease_ttl: 6 s with an election timeout of 6000 ms: want at least 9 s"},
		{"etcd_endpoints = http://e1:2379", "t.conf:1: etcd_endpoints: \"http://e1:2379\": want https://host:port"},
		{"etcd_endpoints = ,", "t.conf:1: etcd_endpoints: empty"},
		{"node_name = a\netcd_endpoints = https://e:2379\netcd_ca_file = /ca", "t.conf:2: etcd_endpoints: needs etcd_cert_file"},
		{"\n\netcd_key_file = /k", "t.conf:3: etcd_key_file: only used with etcd_endpoints"},
		{"down_out_interval = 5", "t.conf:1: down_out_interval: \"5\": want seconds, 10..604800, or 0"},
		{"etcd_ca_file = rel", "t.conf:1: etcd_ca_file: \"rel\": want an absolute path"},
	} {
		_, err := Parse(strings.NewReader(tc.in), "t.conf")
		var ce *Error
		if err == nil || !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want prefix %q", tc.in, err, tc.want)
		}
	}
}

// TestKeysAreKnown: every key Keys lists is one Parse knows (no warning).
func TestKeysAreKnown(t *testing.T) {
	for _, k := range Keys() {
		if c, _ := Parse(strings.NewReader(k+" = x\n"), "t.conf"); len(c.Warnings) != 0 {
			t.Errorf("Keys lists %s, which Parse does not know", k)
		}
	}
}

func TestParseRebuildBusyRate(t *testing.T) {
	if c, err := Parse(strings.NewReader(""), "t.conf"); err != nil || c.RebuildBusyRate != 100<<20 {
		t.Errorf("default: %d %v, want 100 MiB/s", c.RebuildBusyRate, err)
	}
	for in, want := range map[string]int64{"0": 0, "64M": 64 << 20, "1G/s": 1 << 30, "500000": 500000} {
		c, err := Parse(strings.NewReader("rebuild_busy_rate = "+in+"\n"), "t.conf")
		if err != nil || c.RebuildBusyRate != want {
			t.Errorf("rebuild_busy_rate = %s: %d %v, want %d", in, c.RebuildBusyRate, err, want)
		}
	}
	for _, in := range []string{"-1", "fast", "10X", "2000000T", ""} {
		if _, err := Parse(strings.NewReader("rebuild_busy_rate = "+in+"\n"), "t.conf"); err == nil {
			t.Errorf("rebuild_busy_rate = %q: accepted", in)
		}
	}
}
