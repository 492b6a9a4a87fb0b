//go:build linux

package cluster_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationClusterThreeGuests: fabraidd in three 6.12 guests on the
// harness network makes a cluster through the CLI: init on a, join b and c
// with single-use tokens, then "fabraid cluster status --json" on c shows
// 3 healthy voting etcd members and every node's claimed drive; the token
// b used is refused for c; a TLS client without a certificate cannot read
// a's etcd.
func TestIntegrationClusterThreeGuests(t *testing.T) {
	files := map[string]string{
		"/usr/bin/fabraid":  vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraid"),
		"/usr/bin/fabraidd": vmtest.BuildBinary(t, "github.com/fabraid/fabraid/cmd/fabraidd"),
	}
	var guests []vmtest.GuestConfig
	for _, n := range []string{"a", "b", "c"} {
		guests = append(guests, vmtest.GuestConfig{Name: n, Kernel: vmtest.Kernel612, Disks: []vmtest.Disk{{Size: 32 << 20}}, Files: files})
	}
	vmtest.Run(t, vmtest.Options{Guests: guests, Timeout: 300 * time.Second}, clusterGuest)
}

func fabraid(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("/usr/bin/fabraid", args...).CombinedOutput()
	t.Logf("fabraid %s: %v\n%s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	return string(out), err
}

func mustFabraid(t *testing.T, args ...string) string {
	t.Helper()
	out, err := fabraid(t, args...)
	for deadline := time.Now().Add(90 * time.Second); err != nil && readOnly(args) && etcdSlow(out) && time.Now().Before(deadline); {
		time.Sleep(2 * time.Second)
		out, err = fabraid(t, args...)
	}
	if err != nil {
		t.Fatalf("fabraid %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(out)
}

// createVolume runs "fabraid volume create NAME ARGS... --json" and
// returns its JSON. A create that failed only on an etcd deadline is
// repeated (up to 2 min): when the first one had committed, the repeat
// finds the volume, and then its own "volume show" is polled until the
// volume is optimal.
func createVolume(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := append([]string{"volume", "create", name}, append(args, "--json")...)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := fabraid(t, cmd...)
		switch {
		case err == nil:
			return strings.TrimSpace(out)
		case strings.Contains(out, "exists"):
			for {
				show, err := fabraid(t, "volume", "show", name, "--json")
				if err == nil && strings.Contains(strings.ReplaceAll(show, " ", ""), `"state":"optimal"`) {
					return strings.TrimSpace(show)
				}
				if time.Now().After(deadline) {
					t.Fatalf("volume %s exists after a repeated create but is not optimal: %s (%v)", name, show, err)
				}
				time.Sleep(2 * time.Second)
			}
		case !etcdSlow(out) || time.Now().After(deadline):
			t.Fatalf("fabraid %s: %v", strings.Join(cmd, " "), err)
		}
		time.Sleep(2 * time.Second)
	}
}

// readOnly reports whether a fabraid command only reads state (list,
// show, status): such a command may be repeated.
func readOnly(args []string) bool {
	if len(args) < 2 {
		return false
	}
	switch args[0] + " " + args[1] {
	case "volume list", "volume show", "cluster status":
		return true
	}
	return false
}

// etcdSlow reports whether a command failed only because an etcd read
// did not finish within the daemon's bound: on a CPU-starved TCG guest a
// linearizable read can take seconds (ReadIndex retries) although the
// cluster is healthy. What the tests check does not depend on it.
func etcdSlow(out string) bool {
	return strings.Contains(out, "context deadline exceeded") || strings.Contains(out, "request timed out")
}

// startDaemon writes the node's configuration and starts fabraidd,
// returning once its API answers.
func startDaemon(t *testing.T, g *vmtest.Env) {
	t.Helper()
	startDaemonClaiming(t, g, g.Disks)
}

// tcgClusterConf is the cluster timing of the VM tests: three TCG guests
// share two host cores with other tests, and etcd in a guest can go
// seconds without CPU. etcd's default 100 ms heartbeat and 1 s election
// timeout then elect new leaders over and over, and a 6 s owner lease
// lapses (every engine frozen) a few times a minute; under a whole CI run
// 8 s leases still lapsed during a create. Failover times
// measured with it are owner-TTL-bound: docs/performance.md says which
// TTL they used.
const tcgClusterConf = "owner_lease_ttl = 15\netcd_heartbeat_ms = 200\netcd_election_ms = 2000\n"

// ownerTTLFile, in a guest, overrides tcgClusterConf's owner lease: the
// host's FABRAID_VMTEST_OWNER_TTL (seconds), for measuring a failover
// with another lease (clusterVolumeGuests passes it).
const ownerTTLFile = "/etc/fabraid-test-owner-ttl"

// downOutFile, in a guest, sets down_out_interval (seconds): the
// re-protection test's short interval.
const downOutFile = "/etc/fabraid-test-down-out"

// clusterConf is tcgClusterConf with the owner lease of ownerTTLFile and
// the down_out_interval of downOutFile, if the guest has them.
func clusterConf() string {
	conf := tcgClusterConf
	if b, err := os.ReadFile(ownerTTLFile); err == nil {
		conf = strings.Replace(conf, "owner_lease_ttl = 15\n", "owner_lease_ttl = "+strings.TrimSpace(string(b))+"\n", 1)
	}
	if b, err := os.ReadFile(downOutFile); err == nil {
		conf += "down_out_interval = " + strings.TrimSpace(string(b)) + "\n"
	}
	return conf
}

// startDaemonClaiming is startDaemon claiming only the given disks (none
// on a reboot: the claims are in the state directory).
func startDaemonClaiming(t *testing.T, g *vmtest.Env, claim []string) {
	t.Helper()
	conf := "node_name = " + g.Name + "\ncluster_address = " + g.Addr(g.Name) + "\nengine_mode = process\nmetrics_address =\n" + clusterConf() + guestNVMeTLS(t)
	os.MkdirAll("/etc/fabraid", 0o755)
	if err := os.WriteFile("/etc/fabraid/fabraid.conf", []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/fabraidd")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("fabraidd did not stop in 20 s")
		}
	})
	for range 600 {
		if exec.Command("/usr/bin/fabraid", "volume", "list").Run() == nil {
			for _, d := range claim {
				mustFabraid(t, "drive", "claim", d)
			}
			return
		}
		select {
		case err := <-done:
			t.Fatalf("fabraidd exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("fabraidd: no API after 60 s")
}

func clusterGuest(t *testing.T, g *vmtest.Env) {
	tokFile := func(n string) string { return filepath.Join(g.Shared, "token-"+n) }
	switch g.Name {
	case "a":
		startDaemon(t, g)
		mustFabraid(t, "cluster", "init", "--name", "vmtest")
		for _, n := range []string{"b", "c"} {
			tok := mustFabraid(t, "cluster", "token", "--ttl", "10m")
			if err := os.WriteFile(tokFile(n), []byte(tok), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		g.Signal(t, "init")
		g.Wait(t, "c", "done")
	case "b":
		g.Wait(t, "a", "init")
		startDaemon(t, g)
		tok, _ := os.ReadFile(tokFile("b"))
		mustFabraid(t, "cluster", "join", g.Addr("a"), "--token", string(tok))
		g.Signal(t, "joined")
		g.Wait(t, "c", "done")
	case "c":
		g.Wait(t, "b", "joined")
		startDaemon(t, g)
		used, _ := os.ReadFile(tokFile("b"))
		if out, err := fabraid(t, "cluster", "join", g.Addr("a"), "--token", string(used)); err == nil || !strings.Contains(out, "already used by node b") {
			t.Errorf("join with b's token: %v %s, want refused as used by b", err, out)
		}
		tok, _ := os.ReadFile(tokFile("c"))
		mustFabraid(t, "cluster", "join", g.Addr("b"), "--token", string(tok))
		st, voters := waitHealthyMembers(t, 3, 2*time.Minute)
		if voters != 3 || !st.Healthy || st.Leader == "" {
			t.Errorf("status: %d healthy voting members, healthy %v, leader %q; want 3, true, a leader", voters, st.Healthy, st.Leader)
		}
		if len(st.Nodes) != 3 {
			t.Errorf("nodes %+v, want a, b, c", st.Nodes)
		}
		for _, n := range st.Nodes {
			if !n.Alive || len(n.Drives) != 1 || n.HostNQN == "" || n.ClusterAddress != g.Addr(n.Name) {
				t.Errorf("node %+v: want alive, 1 drive, a host NQN, address %s", n, g.Addr(n.Name))
			}
		}
		mustFabraid(t, "cluster", "status")
		noCertRefused(t, g.Addr("a"))
		g.Signal(t, "done")
	}
}

// waitHealthyMembers polls cluster status until want voting members are
// healthy with a leader, or until limit: right after a join on a starved
// TCG host the members' health probes can time out for a while although
// the cluster converges. It returns the last status and its healthy voters.
func waitHealthyMembers(t *testing.T, want int, limit time.Duration) (api.ClusterStatus, int) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var st api.ClusterStatus
		if err := json.Unmarshal([]byte(mustFabraid(t, "cluster", "status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		voters := 0
		for _, m := range st.Members {
			if !m.Learner && m.Healthy {
				voters++
			}
		}
		if (voters == want && st.Healthy && st.Leader != "") || time.Now().After(deadline) {
			return st, voters
		}
		time.Sleep(2 * time.Second)
	}
}

// noCertRefused: a TLS client that trusts the cluster CA but presents no
// certificate is refused by a's etcd client port.
func noCertRefused(t *testing.T, addr string) {
	ca, err := os.ReadFile("/var/lib/fabraid/cluster/pki/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(addr, "2379"), &tls.Config{RootCAs: pool})
	if err == nil {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("etcd at %s without a client certificate: %v, want the handshake refused", addr, err)
	}
}
