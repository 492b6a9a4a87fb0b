package nvmf

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// writeTree creates files (path -> content) and symlinks (path -> "@target")
// under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if len(c) > 0 && c[0] == '@' {
			if err := os.MkdirAll(filepath.Join(root, c[1:]), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(root, c[1:]), full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const sysfsHostKey = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:"

// The values below were recorded in a Debian 6.12 guest
// (TestIntegrationTarget): a tcp controller with the member profile and a
// loop controller, both paths of one multipath head.
func TestSysfsControllers(t *testing.T) {
	root := t.TempDir()
	const nqn = "nqn.2026-11.io.fabraid:vol:7c1e6d0a-2a8f-4f43-9a57-3d1c2a9f0001"
	const c0 = "devices/virtual/nvme-fabrics/ctl/nvme0/"
	const c1 = "devices/virtual/nvme-fabrics/ctl/nvme1/"
	writeTree(t, root, map[string]string{
		"class/nvme/nvme0":                  "@" + c0,
		"class/nvme/nvme1":                  "@" + c1,
		"class/nvme/nvme-fabrics":           "@devices/virtual/misc/nvme-fabrics",
		c0 + "transport":                    "tcp\n",
		c0 + "address":                      "traddr=127.0.0.1,trsvcid=4420,src_addr=127.0.0.1\n",
		c0 + "subsysnqn":                    nqn + "\n",
		c0 + "state":                        "live\n",
		c0 + "cntrltype":                    "io\n",
		c0 + "cntlid":                       "1\n",
		c0 + "hostnqn":                      "nqn.2014-08.org.nvmexpress:uuid:b58748ae-64be-4682-b66f-06065b44d19a\n",
		c0 + "hostid":                       "b58748ae-64be-4682-b66f-06065b44d19a\n",
		c0 + "kato":                         "2\n",
		c0 + "reconnect_delay":              "2\n",
		c0 + "ctrl_loss_tmo":                "60\n",
		c0 + "fast_io_fail_tmo":             "0\n",
		c0 + "dhchap_secret":                sysfsHostKey + "\n",
		c0 + "dhchap_ctrl_secret":           "none\n",
		c0 + "nvme0c0n1/nsid":               "1\n",
		c0 + "nvme0c0n1/ana_state":          "optimized\n",
		c0 + "nvme0c0n1/ana_grpid":          "1\n",
		c0 + "nvme0c0n2/nsid":               "2\n",
		c0 + "nvme0c0n2/ana_state":          "non-optimized\n",
		c0 + "nvme0c0n2/ana_grpid":          "2\n",
		c1 + "transport":                    "loop\n",
		c1 + "address":                      "\n",
		c1 + "subsysnqn":                    nqn + "\n",
		c1 + "state":                        "connecting\n",
		c1 + "cntlid":                       "2\n",
		c1 + "ctrl_loss_tmo":                "off\n",
		c1 + "fast_io_fail_tmo":             "off\n",
		c1 + "reconnect_delay":              "10\n",
		c1 + "kato":                         "5\n",
		c1 + "nvme0c1n1/nsid":               "1\n",
		"class/nvme-subsystem/nvme-subsys0": "@devices/virtual/nvme-subsystem/nvme-subsys0",
		"devices/virtual/nvme-subsystem/nvme-subsys0/subsysnqn":    nqn + "\n",
		"devices/virtual/nvme-subsystem/nvme-subsys0/iopolicy":     "numa\n",
		"devices/virtual/nvme-subsystem/nvme-subsys0/nvme0":        "@" + c0,
		"devices/virtual/nvme-subsystem/nvme-subsys0/nvme1":        "@" + c1,
		"devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1/size": "65536\n",
		"devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n2/size": "32768\n",
	})
	s := Sysfs{Root: root}
	cs, err := s.Controllers()
	if err != nil {
		t.Fatal(err)
	}
	want := []Controller{{
		Name: "nvme0", Instance: 0, Transport: "tcp",
		Address:      Address{TrAddr: "127.0.0.1", TrSvcID: "4420", SrcAddr: "127.0.0.1"},
		SubsystemNQN: nqn, Subsystem: "nvme-subsys0", State: "live", Type: "io", CntlID: 1,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:b58748ae-64be-4682-b66f-06065b44d19a", HostID: "b58748ae-64be-4682-b66f-06065b44d19a",
		Timeouts:     Timeouts{KeepAlive: 2, ReconnectDelay: 2, CtrlLoss: 60, FastIOFail: 0},
		DHCHAPSecret: sysfsHostKey, // "none" is no secret
		Paths: []Path{
			{Name: "nvme0c0n1", Head: "nvme0n1", NSID: 1, ANAState: "optimized", ANAGroup: 1},
			{Name: "nvme0c0n2", Head: "nvme0n2", NSID: 2, ANAState: "non-optimized", ANAGroup: 2},
		},
	}, {
		Name: "nvme1", Instance: 1, Transport: "loop", SubsystemNQN: nqn, Subsystem: "nvme-subsys0", State: "connecting", CntlID: 2,
		Timeouts: Timeouts{KeepAlive: 5, ReconnectDelay: 10, CtrlLoss: Forever, FastIOFail: Forever},
		Paths:    []Path{{Name: "nvme0c1n1", Head: "nvme0n1", NSID: 1}},
	}}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("Controllers:\n got %+v\nwant %+v", cs, want)
	}
	subs, err := s.Subsystems()
	if err != nil {
		t.Fatal(err)
	}
	wantSubs := []Subsystem{{Name: "nvme-subsys0", NQN: nqn, IOPolicy: "numa", Controllers: []string{"nvme0", "nvme1"}, Heads: []string{"nvme0n1", "nvme0n2"}}}
	if !reflect.DeepEqual(subs, wantSubs) {
		t.Fatalf("Subsystems:\n got %+v\nwant %+v", subs, wantSubs)
	}
	if got := FindControllers(cs, nqn, "127.0.0.1", ""); len(got) != 1 || got[0].Name != "nvme0" {
		t.Fatalf("FindControllers: %+v", got)
	}
	if _, err := s.Controller("sda"); err == nil {
		t.Fatal("non-nvme name accepted")
	}
	empty, err := Sysfs{Root: t.TempDir()}.Controllers()
	if err != nil || len(empty) != 0 {
		t.Fatalf("no nvme class: %v %v", empty, err)
	}
}

func TestParseAddress(t *testing.T) {
	a := ParseAddress("traddr=fe80::1,trsvcid=4420,host_traddr=fe80::2,host_iface=eth1,src_addr=fe80::2,future=1\n")
	if a != (Address{TrAddr: "fe80::1", TrSvcID: "4420", HostTrAddr: "fe80::2", HostIface: "eth1", SrcAddr: "fe80::2"}) {
		t.Fatalf("%+v", a)
	}
}

func TestLoadHostIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nvme")
	id, err := LoadHostIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id.NQN != "nqn.2014-08.org.nvmexpress:uuid:"+id.ID {
		t.Fatalf("generated %+v", id)
	}
	again, err := LoadHostIdentity(dir)
	if err != nil || again != id {
		t.Fatalf("second load %+v %v, want %+v", again, err, id)
	}
	// Only a uuid hostnqn (as some distributions ship): hostid follows it.
	dir2 := t.TempDir()
	os.WriteFile(filepath.Join(dir2, "hostnqn"), []byte("nqn.2014-08.org.nvmexpress:uuid:0C6F5E92-5FE1-4C4F-9D43-CD8B3A19A9A9\n"), 0o644)
	id2, err := LoadHostIdentity(dir2)
	if err != nil || id2.ID != "0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9a9" {
		t.Fatalf("%+v %v", id2, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir2, "hostid"))
	if string(b) != id2.ID+"\n" {
		t.Fatalf("hostid file %q", b)
	}
	dir3 := t.TempDir()
	os.WriteFile(filepath.Join(dir3, "hostnqn"), []byte("not-an-nqn\n"), 0o644)
	if _, err := LoadHostIdentity(dir3); err == nil {
		t.Fatal("bad hostnqn accepted")
	}
}
