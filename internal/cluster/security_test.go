package cluster

import (
	"crypto/tls"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/pki"
)

// These tests (issue 28) play a node that holds only a client
// certificate and, like every node until etcd RBAC, may write all of
// etcd.

// clientNode joins a client-only node n4 to the three members.
func clientNode(t *testing.T, c *clock, via *Node) (n4 *Node, tok string) {
	t.Helper()
	n4 = newNode(t, "n4", c)
	tok = mustToken(t, via, time.Hour)
	if err := n4.Join(ctxT(t), joinAddr(via), tok); err != nil {
		t.Fatalf("join n4: %v", err)
	}
	if n4.st.Member {
		t.Fatal("n4 became an etcd member beyond the target of 3")
	}
	return n4, tok
}

// TestPeerPortMembersOnly: etcd's peer (raft) port refuses a node
// certificate at the TLS handshake (a client-only node's, and a member's
// node certificate too) and takes a member certificate; a member whose
// files predate member certificates makes one at its start and rejoins
// raft with it.
func TestPeerPortMembersOnly(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, n2, n3 := threeMembers(t, &c)
	n4, _ := clientNode(t, &c, n1)
	peer := "https://127.0.0.1:" + strconv.Itoa(n1.o.PeerPort)
	get := func(cfg *tls.Config, path string) (int, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(peer + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, n := range []*Node{n4, n2} {
		cfg, err := n.files.ClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/members", "/version", "/raft/probing"} {
			code, err := get(cfg, p)
			if err == nil {
				t.Errorf("%s's node certificate on the peer port %s: HTTP %d, want a TLS refusal", n.o.Name, p, code)
			} else if !strings.Contains(err.Error(), "tls") {
				t.Errorf("%s's node certificate on the peer port %s: %v, want a TLS refusal", n.o.Name, p, err)
			}
		}
	}
	mcfg, err := n2.files.MemberTLS()
	if err != nil {
		t.Fatal(err)
	}
	if code, err := get(mcfg, "/version"); err != nil || code != http.StatusOK {
		t.Errorf("member certificate on the peer port: %d %v, want 200", code, err)
	}

	// n3 restarts without a member certificate (as made before them).
	crash(n3)
	os.Remove(n3.files.MemberCert())
	os.Remove(n3.files.MemberKey())
	again := restarted(t, n3, &c, 30*time.Second)
	if err := again.Start(ctx); err != nil {
		t.Fatalf("restart of n3 without a member certificate: %v", err)
	}
	b, err := os.ReadFile(again.files.MemberCert())
	if err != nil {
		t.Fatal(err)
	}
	if mc, err := pki.ParseCert(b); err != nil || mc.Subject.CommonName != pki.MemberCN {
		t.Fatalf("n3's new member certificate: %v %v", mc, err)
	}
	// n3 is in raft again: a write through n1 is read from n3's member
	// alone (serializable: its own applied state).
	if _, err := n1.cli.Put(ctx, "/test/after-restart", "v"); err != nil {
		t.Fatal(err)
	}
	tcfg, _ := again.files.ClientTLS()
	direct, err := clientv3.New(clientv3.Config{Endpoints: []string{again.url(again.o.ClientPort)}, TLS: tcfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	for {
		resp, err := direct.Get(ctx, "/test/after-restart", clientv3.WithSerializable())
		if err == nil && len(resp.Kvs) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("n3 did not catch up after its restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, err := again.Status(ctx)
	if v, _ := voting(st); err != nil || v != 3 || !st.Healthy {
		t.Errorf("status after n3's restart: %d voting, healthy %v, %v", v, st.Healthy, err)
	}
}
