package cluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/pki"
	"github.com/fabraid/fabraid/internal/cluster/token"
)

// These tests (issue 28) play a node that holds only a client
// certificate. Since etcd RBAC (package rbac, TestClientWritesOnlyItsOwn)
// such a node may write only its own keys and the shared volume
// prefixes; TestClientCannotTakeCAKey turns authentication off to check
// the second line of defense, for clusters that have no RBAC (made
// before it, external etcd).

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

// TestClientCannotTakeCAKey: etcd refuses the client-only node's writes
// below (RBAC). With authentication turned off (a cluster without RBAC),
// a client-only node makes its own join token records, raises
// etcd_members in the cluster record, sets its own used token back to
// unused and even removes a member so that the cluster is below its
// target, then joins through a member's join service: it never gets the
// CA key. A member's own token still makes a member, and the target
// stays the members' (3), not the record's (5).
func TestClientCannotTakeCAKey(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, _, n3 := threeMembers(t, &c)
	n4, own := clientNode(t, &c, n1)
	cli := n4.Client()
	fp := n4.st.CAFingerprint
	if _, err := cli.Put(ctx, keys.Cluster, "{}"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("client-only n4 writes the cluster record: %v, want permission denied", err)
	}
	if _, err := cli.Put(ctx, keys.Token("000000000000"), "{}"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("client-only n4 writes a token record: %v, want permission denied", err)
	}
	if _, err := n1.Client().AuthDisable(ctx); err != nil {
		t.Fatal(err)
	}

	put := func(k string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if _, err := cli.Put(ctx, k, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k string, v any) {
		t.Helper()
		resp, err := cli.Get(ctx, k)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v %v", k, resp, err)
		}
		if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
			t.Fatal(err)
		}
	}
	// The cluster record now asks for 5 voting members.
	var rec map[string]any
	get(keys.Cluster, &rec)
	rec["etcd_members"] = 5
	put(keys.Cluster, rec)

	// forge writes an unused token record the way token.Issue did, with a
	// MAC under a key the client can make (its node key's hash).
	nodeKey, _ := os.ReadFile(n4.files.NodeKey())
	forge := func() string {
		t.Helper()
		tk, err := token.New(fp)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(tk.Secret))
		m := sha256.Sum256(append(nodeKey, tk.ID...))
		now := c.now().UTC()
		put(keys.Token(tk.ID), map[string]any{"version": token.Version, "sha256": hex.EncodeToString(h[:]),
			"created": now, "expires": now.Add(time.Hour), "seq": 2, "mac": hex.EncodeToString(m[:])})
		return tk.Encode()
	}
	// reuse sets n4's own, used token back to unused.
	ownTok, _ := token.Parse(own)
	reuse := func() string {
		t.Helper()
		var r map[string]any
		get(keys.Token(ownTok.ID), &r)
		delete(r, "used_by")
		delete(r, "used_at")
		put(keys.Token(ownTok.ID), r)
		return own
	}
	attempt := func(name, tok, why string) {
		t.Helper()
		key, _, _ := pki.NewKey()
		pub, _ := pki.PublicPEM(key.Public())
		q := JoinRequest{Version: StateVersion, Token: tok, Node: name, Address: "127.0.0.1",
			PeerPort: etcdtest.FreePort(t), ClientPort: etcdtest.FreePort(t), PublicKey: string(pub)}
		rep, err := postJoin(ctx, joinAddr(n1), "127.0.0.1", fp, q)
		if err == nil && rep.CAKey != "" {
			t.Fatalf("%s: the client-only node got the CA key (member %s)", name, rep.MemberID)
		}
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: join %v, want refused: %s", name, err, why)
		}
	}
	const forged, used = "not made by an etcd member", "rewritten after it was issued"
	attempt("x1", forge(), forged)
	attempt("x2", reuse(), used)

	// Below the target: the client removes n3's etcd member (etcd's
	// cluster API takes any client certificate).
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if m.Name == "n3" {
			// etcd refuses changes until every member has been
			// connected for 5 s (strict reconfiguration check).
			for {
				_, err := cli.MemberRemove(ctx, m.ID)
				if err == nil {
					break
				}
				if !strings.Contains(err.Error(), "unhealthy") || ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	crash(n3)
	attempt("x3", forge(), forged)
	attempt("x4", reuse(), used)

	// A member's token: the member's decision (2 voting < 3) makes n5 a
	// member; n6 is a client although the record says 5.
	n5, n6 := newNode(t, "n5", &c), newNode(t, "n6", &c)
	if err := n5.Join(ctx, joinAddr(n1), mustToken(t, n1, time.Hour)); err != nil {
		t.Fatalf("join n5: %v", err)
	}
	if err := n6.Join(ctx, joinAddr(n5), mustToken(t, n5, time.Hour)); err != nil {
		t.Fatalf("join n6 through n5: %v", err)
	}
	if !n5.st.Member || n6.st.Member {
		t.Fatalf("n5 member %v, n6 member %v; want n5 a member (2 < 3) and n6 a client (3 = 3, the record's 5 ignored)", n5.st.Member, n6.st.Member)
	}
	if _, err := os.Stat(n6.files.CAKey()); !os.IsNotExist(err) {
		t.Errorf("client n6 has a CA key file: %v", err)
	}
	// A client-only node cannot make tokens through fabraid either.
	if _, err := n4.Token(ctx, time.Hour); err == nil {
		t.Error("client-only n4 made a join token")
	}
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

// TestJoinChecksNameAndAddress: the join service certifies only a node
// name that passes the configuration's node_name rule and the IP the
// request comes from; a refused request leaves the token unused. A joiner
// that dials from the address it names (postJoin binds its cluster
// address) gets that address in its certificate.
func TestJoinChecksNameAndAddress(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1 := newNode(t, "n1", &c)
	n1.o.Members = 1 // joiners become clients: no learner for an address nobody serves
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	fp := n1.st.CAFingerprint
	var tok string
	join := func(name, addr, from string) (*JoinReply, error) {
		t.Helper()
		key, _, _ := pki.NewKey()
		pub, _ := pki.PublicPEM(key.Public())
		q := JoinRequest{Version: StateVersion, Token: tok, Node: name, Address: addr,
			PeerPort: 2380, ClientPort: 2379, PublicKey: string(pub)}
		return postJoin(ctx, joinAddr(n1), from, fp, q)
	}
	for _, tc := range []struct{ name, addr, from, why string }{
		{"../../x/y", "127.0.0.1", "127.0.0.1", "node name"},
		{"a\nb", "127.0.0.1", "127.0.0.1", "node name"},
		{"a b", "127.0.0.1", "127.0.0.1", "node name"},
		{"", "127.0.0.1", "127.0.0.1", "node name"},
		{"-x", "127.0.0.1", "127.0.0.1", "node name"},
		{"x\u202e", "127.0.0.1", "127.0.0.1", "node name"},
		{pki.MemberCN, "127.0.0.1", "127.0.0.1", "node name"},
		{strings.Repeat("a", 64), "127.0.0.1", "127.0.0.1", "node name"},
		{"n2", "10.9.9.9", "127.0.0.1", "comes from 127.0.0.1"},
		{"n2", "127.0.0.2", "127.0.0.1", "comes from 127.0.0.1"},
		{"n2", "127.0.0.1", "127.0.0.2", "comes from 127.0.0.2"},
		{"n2", "not-an-ip", "127.0.0.1", "not an IP address"},
	} {
		tok = mustToken(t, n1, time.Hour) // each case its own: a certified one must not hide the next
		rep, err := join(tc.name, tc.addr, tc.from)
		if err == nil {
			cert, _ := pki.ParseCert([]byte(rep.NodeCert))
			t.Errorf("join as %q at %s from %s: certified (%v %v), want refused: %s", tc.name, tc.addr, tc.from, cert.DNSNames, cert.IPAddresses, tc.why)
			continue
		}
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("join as %q at %s from %s: %v, want refused: %s", tc.name, tc.addr, tc.from, err, tc.why)
		}
	}
	// The last refused case's token is still unused: a joiner at
	// 127.0.0.2 dialling from it gets a certificate for that address.
	rep, err := join("n2", "127.0.0.2", "127.0.0.2")
	if err != nil {
		t.Fatalf("join from the named address: %v", err)
	}
	cert, err := pki.ParseCert([]byte(rep.NodeCert))
	if err != nil || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("127.0.0.2")) || cert.Subject.CommonName != "n2" {
		t.Fatalf("certificate %v: IPs %v, CN %q", err, cert.IPAddresses, cert.Subject.CommonName)
	}
}

// fakeJoinService serves POST /v1/join with a member certificate of ca
// and the reply reply makes: a join service the token's pin accepts but
// whose reply may be wrong.
func fakeJoinService(t *testing.T, ca *pki.CA, reply func(q JoinRequest, pub any) JoinReply) string {
	t.Helper()
	key, keyPEM, _ := pki.NewKey()
	certPEM, err := ca.IssueMember(key.Public(), "fake", []net.IP{net.ParseIP("127.0.0.1")}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cert.Certificate = append(cert.Certificate, ca.Cert.Raw)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q JoinRequest
		json.NewDecoder(r.Body).Decode(&q)
		pub, err := pki.ParsePublic([]byte(q.PublicKey))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(reply(q, pub))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestJoinChecksReply: the joiner takes a join reply only if its CA
// certificate is the pinned one, the node certificate chains to it and
// names this node, its address and its key, a CA key is the CA's, and
// the endpoints are https://IP:port; a refused reply leaves nothing on
// disk. The join service here presents a member certificate of the
// pinned CA, so the TLS pin passes and only the reply is wrong.
func TestJoinChecksReply(t *testing.T) {
	var c clock
	now := time.Now()
	caA, _ := pki.NewCA("a", now)
	caB, _ := pki.NewCA("b", now)
	fpA := pki.Fingerprint(caA.Cert)
	issue := func(ca *pki.CA, pub any, name, ip string) string {
		b, err := ca.Issue(pub, name, []net.IP{net.ParseIP(ip)}, now)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	other, _, _ := pki.NewKey()
	good := func(q JoinRequest, pub any) JoinReply {
		return JoinReply{Version: StateVersion, Cluster: "a", CAFingerprint: fpA, CACert: string(caA.CertPEM),
			NodeCert: issue(caA, pub, q.Node, q.Address), Endpoints: []string{"https://127.0.0.1:1"}}
	}
	for _, tc := range []struct {
		name   string
		change func(r *JoinReply, q JoinRequest, pub any)
		why    string
	}{
		{"another CA", func(r *JoinReply, q JoinRequest, pub any) {
			r.CACert, r.NodeCert = string(caB.CertPEM), issue(caB, pub, q.Node, q.Address)
		}, "the join token pins " + fpA},
		{"node certificate of another CA", func(r *JoinReply, q JoinRequest, pub any) { r.NodeCert = issue(caB, pub, q.Node, q.Address) }, "not signed by the pinned CA"},
		{"another name", func(r *JoinReply, q JoinRequest, pub any) { r.NodeCert = issue(caA, pub, "x", q.Address) }, `this node is "j"`},
		{"another IP", func(r *JoinReply, q JoinRequest, pub any) { r.NodeCert = issue(caA, pub, q.Node, "10.0.0.9") }, "cluster address is 127.0.0.1"},
		{"another key", func(r *JoinReply, q JoinRequest, pub any) { r.NodeCert = issue(caA, other.Public(), q.Node, q.Address) }, "not for the key"},
		{"no certificate", func(r *JoinReply, q JoinRequest, pub any) { r.NodeCert = "" }, "node certificate"},
		{"CA key of another CA", func(r *JoinReply, q JoinRequest, pub any) {
			r.MemberID, r.InitialCluster, r.CAKey = "1", "x=https://127.0.0.1:1", string(caB.KeyPEM)
		}, "CA key"},
		{"no endpoints", func(r *JoinReply, q JoinRequest, pub any) { r.Endpoints = nil }, "no etcd endpoints"},
		{"http endpoint", func(r *JoinReply, q JoinRequest, pub any) { r.Endpoints = []string{"http://127.0.0.1:2379"} }, "want https://IP:port"},
		{"endpoint with a path", func(r *JoinReply, q JoinRequest, pub any) { r.Endpoints = []string{"https://127.0.0.1:2379/x"} }, "want https://IP:port"},
		{"endpoint with a user", func(r *JoinReply, q JoinRequest, pub any) { r.Endpoints = []string{"https://u:p@127.0.0.1:2379"} }, "want https://IP:port"},
		{"endpoint without a port", func(r *JoinReply, q JoinRequest, pub any) { r.Endpoints = []string{"https://127.0.0.1"} }, "want https://IP:port"},
		{"endpoint by name", func(r *JoinReply, q JoinRequest, pub any) { r.Endpoints = []string{"https://etcd.example:2379"} }, "want https://IP:port"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			addr := fakeJoinService(t, caA, func(q JoinRequest, pub any) JoinReply {
				r := good(q, pub)
				tc.change(&r, q, pub)
				return r
			})
			n := newNode(t, "j", &c)
			tok, _ := token.New(fpA)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := n.Join(ctx, addr, tok.Encode())
			if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("join: %v, want %v: %s", err, ErrBadReply, tc.why)
			}
			if n.InCluster() {
				t.Error("in a cluster after a bad reply")
			}
			if _, err := os.Stat(n.files.CACert()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s after a bad reply: %v", n.files.CACert(), err)
			}
		})
	}
}

// TestTokenTTLCap: the daemon's Node.Token refuses a validity above
// model.MaxTokenTTL (24 h), naming the cap, and makes no record; 24 h
// itself is made.
func TestTokenTTLCap(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1 := newNode(t, "n1", &c)
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{model.MaxTokenTTL + time.Second, 7 * 24 * time.Hour, 0} {
		if tok, err := n1.Token(ctx, ttl); err == nil || !strings.Contains(err.Error(), "at most 24h0m0s") {
			t.Errorf("token with ttl %v: %v %v, want refused naming the cap 24h0m0s", ttl, tok, err)
		}
	}
	resp, err := n1.Client().Get(ctx, keys.Token(""), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("token records after refusals: %v %v, want none", resp, err)
	}
	if _, err := n1.Token(ctx, model.MaxTokenTTL); err != nil {
		t.Errorf("token with ttl %v: %v", model.MaxTokenTTL, err)
	}
}

// TestJoinServerLimits: the join service closes a connection that
// stalls in the TLS handshake, in the request header or in the body, or
// sits idle after a request, within its timeouts (shortened here), and
// answers 413 to a body above joinMaxBody.
func TestJoinServerLimits(t *testing.T) {
	for _, v := range []struct {
		p *time.Duration
		d time.Duration
	}{{&joinHeaderTimeout, 300 * time.Millisecond}, {&joinReadTimeout, 600 * time.Millisecond},
		{&joinWriteTimeout, 5 * time.Second}, {&joinIdleTimeout, 300 * time.Millisecond}} {
		old := *v.p
		*v.p = v.d
		t.Cleanup(func() { *v.p = old })
	}
	ctx := ctxT(t)
	var c clock
	n1 := newNode(t, "n1", &c)
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	tlsConf := &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: pki.VerifyPinned(n1.st.CAFingerprint)}
	// expectClosed reads from conn until the server closes it and fails
	// when it is still open after 3 s (the timeouts here are at most
	// 600 ms).
	expectClosed := func(what string, conn net.Conn) {
		t.Helper()
		start := time.Now()
		conn.SetReadDeadline(start.Add(3 * time.Second))
		buf := make([]byte, 4096)
		for {
			_, err := conn.Read(buf)
			if err == nil {
				continue
			}
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Errorf("%s: still open after 3 s", what)
			} else {
				t.Logf("%s: closed after %v", what, time.Since(start).Round(time.Millisecond))
			}
			return
		}
	}
	dialTLS := func() *tls.Conn {
		t.Helper()
		conn, err := tls.Dial("tcp", joinAddr(n1), tlsConf)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	const header = "POST /v1/join HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"

	// No TLS handshake: a TCP connection that sends nothing.
	raw, err := net.Dial("tcp", joinAddr(n1))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	expectClosed("no TLS handshake", raw)

	// Half a header, then nothing.
	conn := dialTLS()
	io.WriteString(conn, header)
	expectClosed("half a header", conn)

	// The whole header, 10 of 1000 body bytes, then nothing.
	conn = dialTLS()
	io.WriteString(conn, header+"Content-Length: 1000\r\n\r\n{\"version\"")
	expectClosed("10 of 1000 body bytes", conn)

	// A whole request (refused: version 0), answered; then the
	// kept-alive connection idles.
	conn = dialTLS()
	io.WriteString(conn, header+"Content-Length: 2\r\n\r\n{}")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Close {
		t.Fatalf("request of version 0: %s (close %v), want 400 on a kept-alive connection", resp.Status, resp.Close)
	}
	expectClosed("idle after a request", conn)

	// A body above the limit.
	body := `{"version":1,"token":"` + strings.Repeat("a", 2*joinMaxBody) + `"}`
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: 10 * time.Second}
	resp, err = hc.Post("https://"+joinAddr(n1)+"/v1/join", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "larger than 65536 bytes") {
		t.Errorf("a %d-byte request: %s %s, want 413", len(body), resp.Status, b)
	}
}
