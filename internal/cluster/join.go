package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/pki"
	"github.com/fabraid/fabraid/internal/cluster/rbac"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/store"
	"github.com/fabraid/fabraid/internal/cluster/token"
	"github.com/fabraid/fabraid/internal/config"
)

// JoinRequest is the body of POST /v1/join.
type JoinRequest struct {
	Version    int    `json:"version"`
	Token      string `json:"token"`
	Node       string `json:"node"`
	Address    string `json:"address"` // cluster IP of the joiner
	PeerPort   int    `json:"peer_port"`
	ClientPort int    `json:"client_port"`
	PublicKey  string `json:"public_key"` // PEM, ECDSA P-256
}

// JoinReply answers a JoinRequest.
type JoinReply struct {
	Version       int    `json:"version"`
	Cluster       string `json:"cluster"`
	CAFingerprint string `json:"ca_sha256"`
	CACert        string `json:"ca_cert"`
	NodeCert      string `json:"node_cert"`
	// CAKey, MemberID and InitialCluster are set when the joiner becomes
	// an etcd member (a learner until it promotes itself).
	CAKey          string `json:"ca_key,omitempty"`
	MemberID       string `json:"member_id,omitempty"`
	InitialCluster string `json:"initial_cluster,omitempty"`
	// EtcdMembers is the voting-member target the new member keeps in its
	// State (set with CAKey).
	EtcdMembers int      `json:"etcd_members,omitempty"`
	Endpoints   []string `json:"endpoints"`
}

// Limits of the join service, against clients that connect and stall or
// send too much (variables so that tests can shorten them). The write
// timeout runs from the end of the request's header and covers admit,
// whose context it bounds too: a join that waits on etcd longer than
// the joiner (which gives up after a minute) holds no connection and no
// admitting lock beyond it.
var (
	joinHeaderTimeout = 10 * time.Second // TLS handshake and request header
	joinReadTimeout   = 30 * time.Second // handshake, header and body
	joinWriteTimeout  = time.Minute
	joinIdleTimeout   = 30 * time.Second // a kept-alive connection between requests
)

// Sizes the join service reads at most: a request's header and its
// body (a JoinRequest is well under 4 KiB).
const (
	joinMaxHeader = 16 << 10
	joinMaxBody   = 64 << 10
)

// serveJoins starts the join service on the cluster address.
func (n *Node) serveJoins() error {
	t, err := n.files.JoinServerTLS()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(n.o.Address, strconv.Itoa(n.o.JoinPort)))
	if err != nil {
		return fmt.Errorf("cluster: join service: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/join", n.handleJoin)
	n.join = &http.Server{Handler: mux, TLSConfig: t, ReadHeaderTimeout: joinHeaderTimeout, ReadTimeout: joinReadTimeout,
		WriteTimeout: joinWriteTimeout, IdleTimeout: joinIdleTimeout, MaxHeaderBytes: joinMaxHeader,
		ErrorLog: slog.NewLogLogger(n.o.Log.Handler(), slog.LevelDebug)}
	go n.join.ServeTLS(ln, "", "")
	return nil
}

type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	var q JoinRequest
	rep, err := func() (*JoinReply, error) {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, joinMaxBody)).Decode(&q); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Errorf("join request larger than %d bytes", joinMaxBody)}
			}
			return nil, &httpError{http.StatusBadRequest, err}
		}
		ctx, cancel := context.WithTimeout(r.Context(), joinWriteTimeout)
		defer cancel()
		return n.admit(ctx, q, r.RemoteAddr)
	}()
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		var he *httpError
		if errors.As(err, &he) {
			code = he.code
		}
		n.o.Log.Warn("cluster: join refused", "node", q.Node, "from", r.RemoteAddr, "err", err)
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	n.o.Log.Info("cluster: node joined", "node", q.Node, "from", r.RemoteAddr, "etcd_member", rep.MemberID != "")
	json.NewEncoder(w).Encode(rep)
}

// admit checks and redeems a join request (see the package documentation).
//
// Invariant: the CA key goes only to a joiner this member decided to make
// an etcd member from what no client-only node can forge, although every
// node can write all of etcd: the token's record must carry a MAC under
// the token key, which only holders of the CA key derive (package token;
// a record set back to unused or copied is refused too), and the
// voting-member target is this member's own (members), never the cluster
// record's.
//
// remote is the TCP peer address of the request (ip:port). The node
// certificate names q.Node and q.Address only when the name passes the
// configuration's node_name rule and q.Address is that peer address
// (checkJoinRequest): a token holder cannot have the CA certify a name
// that is a path or holds control characters, nor an IP it does not
// join from.
func (n *Node) admit(ctx context.Context, q JoinRequest, remote string) (*JoinReply, error) {
	n.admitting.Lock()
	defer n.admitting.Unlock()
	n.mu.Lock()
	cli, st := n.cli, n.st
	n.mu.Unlock()
	if cli == nil || st == nil {
		return nil, &httpError{http.StatusServiceUnavailable, ErrNotInCluster}
	}
	if q.Version != StateVersion {
		return nil, &httpError{http.StatusBadRequest, fmt.Errorf("join request version %d, this node speaks %d", q.Version, StateVersion)}
	}
	tok, err := token.Parse(q.Token)
	if err != nil {
		return nil, &httpError{http.StatusForbidden, err}
	}
	ip, err := checkJoinRequest(q, remote)
	if err != nil {
		return nil, &httpError{http.StatusBadRequest, err}
	}
	ca, err := n.files.LoadCA()
	if err != nil {
		return nil, fmt.Errorf("cluster: join service without the CA: %w", err)
	}
	tkey, err := ca.TokenKey()
	if err != nil {
		return nil, err
	}
	now := n.o.Now()
	if err := token.Check(ctx, cli, tkey, tok, now); err != nil {
		return nil, &httpError{http.StatusForbidden, err}
	}
	pub, err := pki.ParsePublic([]byte(q.PublicKey))
	if err != nil {
		return nil, &httpError{http.StatusBadRequest, err}
	}
	if _, ok, err := registry.Get(ctx, cli, q.Node); err != nil {
		return nil, err
	} else if ok {
		return nil, &httpError{http.StatusConflict, fmt.Errorf("a node named %s is in the cluster already (fabraid cluster remove %s first, or set another node_name)", q.Node, q.Node)}
	}
	redeemed, err := token.Redeem(ctx, cli, tkey, tok, q.Node, now)
	if err != nil {
		return nil, &httpError{http.StatusForbidden, err}
	}
	rep, err := n.admitRedeemed(ctx, cli, ca, st, q, ip, pub, now)
	if err != nil {
		if rerr := token.Release(ctx, cli, tkey, redeemed); rerr != nil {
			n.o.Log.Warn("cluster: join token of a failed join not given back", "node", q.Node, "err", rerr)
		}
		return nil, err
	}
	return rep, nil
}

// checkJoinRequest checks what the node certificate will name: q.Node
// by the node_name rule of the configuration (config.CheckNodeName), and
// q.Address, which must be the IP the request comes from (remote, the
// TCP peer address): the joiner dials from its cluster address
// (postJoin), and etcd members reach it there, so a request from
// elsewhere (a NAT between nodes, which etcd's peer URLs do not survive
// either) or naming another node's IP is refused. It returns the IP.
func checkJoinRequest(q JoinRequest, remote string) (net.IP, error) {
	if err := config.CheckNodeName(q.Node); err != nil {
		return nil, fmt.Errorf("join request: node name %w", err)
	}
	if err := rbac.CheckName(q.Node); err != nil {
		return nil, fmt.Errorf("join request: %w", err)
	}
	if q.PeerPort <= 0 || q.PeerPort > 65535 || q.ClientPort <= 0 || q.ClientPort > 65535 {
		return nil, fmt.Errorf("join request: ports %d and %d, want 1..65535", q.PeerPort, q.ClientPort)
	}
	a, err := netip.ParseAddr(q.Address)
	if err != nil || a.Zone() != "" {
		return nil, fmt.Errorf("join request: address %q is not an IP address", q.Address)
	}
	from, err := netip.ParseAddrPort(remote)
	if err != nil {
		return nil, fmt.Errorf("join request from %q: %w", remote, err)
	}
	if a.Unmap() != from.Addr().Unmap() {
		return nil, fmt.Errorf("join request names cluster address %s but comes from %s: a node joins from its cluster_address", a, from.Addr())
	}
	return net.IP(a.Unmap().AsSlice()), nil
}

func (n *Node) admitRedeemed(ctx context.Context, cli *clientv3.Client, ca *pki.CA, st *State, q JoinRequest, ip net.IP, pub any, now time.Time) (*JoinReply, error) {
	cert, err := ca.Issue(pub, q.Node, []net.IP{ip}, now)
	if err != nil {
		return nil, err
	}
	rep := &JoinReply{Version: StateVersion, Cluster: st.Cluster, CAFingerprint: st.CAFingerprint, CACert: string(ca.CertPEM), NodeCert: string(cert)}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: member list: %w", err)
	}
	voting := 0
	for _, m := range ml.Members {
		if !m.IsLearner {
			voting++
			rep.Endpoints = append(rep.Endpoints, m.ClientURLs...)
		}
	}
	// The joiner's etcd user (its certificate's CN) gets its role before
	// the joiner has its certificate: a member's is etcd's root role
	// (it promotes itself and will run a join service), a client's is
	// package rbac's node roles. This is done whether or not etcd's
	// authentication is on yet (a cluster made before it), so that
	// enabling it later finds every node's user.
	if target := n.members(st); voting < target {
		if err := rbac.AddMember(ctx, cli, q.Node); err != nil {
			return nil, err
		}
		peer := "https://" + net.JoinHostPort(q.Address, strconv.Itoa(q.PeerPort))
		id, initial, err := store.AddLearner(ctx, cli, q.Node, peer)
		if err != nil {
			if rerr := rbac.RemoveNode(ctx, cli, q.Node); rerr != nil {
				n.o.Log.Warn("cluster: etcd user of a failed member join not removed", "node", q.Node, "err", rerr)
			}
			return nil, &httpError{http.StatusConflict, err}
		}
		rep.MemberID, rep.InitialCluster, rep.CAKey, rep.EtcdMembers = fmt.Sprintf("%x", id), initial, string(ca.KeyPEM), target
	} else if err := rbac.AddClient(ctx, cli, q.Node); err != nil {
		return nil, err
	}
	return rep, nil
}

// members is the voting-member target: this member's State (set at init
// and handed to each member at its join), else, for a state that
// predates it, this node's configuration. Never the cluster record in
// etcd, which every node can write.
func (n *Node) members(st *State) int {
	if st.Members > 0 {
		return st.Members
	}
	return n.o.Members
}

// issueToken stores t's record, MAC'd with the token key derived from
// the CA key: only an etcd member (which holds it) makes join tokens.
func (n *Node) issueToken(ctx context.Context, cli *clientv3.Client, t token.Token, ttl time.Duration) error {
	ca, err := n.files.LoadCA()
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cluster: join tokens are made on etcd members; this node is an etcd client only (%w)", ErrNotMember)
	}
	if err != nil {
		return err
	}
	key, err := ca.TokenKey()
	if err != nil {
		return err
	}
	return token.Issue(ctx, cli, key, t, ttl, n.o.Now())
}

// ErrNotMember: an operation only etcd members do (they hold the CA key).
var ErrNotMember = errors.New("not an etcd member")

// Join joins the cluster whose join service is at addr (host:port; the
// port defaults to 9437) with the token tok.
func (n *Node) Join(ctx context.Context, addr, tok string) error {
	n.life.Lock()
	defer n.life.Unlock()
	if err := n.checkFree(); err != nil {
		return err
	}
	t, err := token.Parse(tok)
	if err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "9437")
	}
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return err
	}
	pubPEM, err := pki.PublicPEM(key.Public())
	if err != nil {
		return err
	}
	q := JoinRequest{Version: StateVersion, Token: t.Encode(), Node: n.o.Name, Address: n.o.Address, PeerPort: n.o.PeerPort, ClientPort: n.o.ClientPort, PublicKey: string(pubPEM)}
	rep, err := postJoin(ctx, addr, n.o.Address, t.CA, q)
	if err != nil {
		return err
	}
	if err := checkReply(rep, t.CA, n.o.Name, net.ParseIP(n.o.Address), key.Public()); err != nil {
		return fmt.Errorf("cluster: join %s: %w", addr, err)
	}
	var caKey []byte
	if rep.MemberID != "" {
		caKey = []byte(rep.CAKey)
	}
	if err := n.files.Write([]byte(rep.CACert), []byte(rep.NodeCert), keyPEM, caKey); err != nil {
		return err
	}
	st := &State{Cluster: rep.Cluster, CAFingerprint: rep.CAFingerprint, Member: rep.MemberID != "", MemberID: rep.MemberID, InitialCluster: rep.InitialCluster, Endpoints: rep.Endpoints, Joined: n.o.Now().UTC()}
	if st.Member {
		st.Members = rep.EtcdMembers
	}
	n.mu.Lock()
	n.st = st
	n.mu.Unlock()
	if st.Member {
		if err := n.becomeMember(ctx, rep); err != nil {
			n.undo()
			return err
		}
	}
	if err := n.connect(ctx); err != nil {
		n.undo()
		return err
	}
	if err := saveState(n.o.Dir, st); err != nil {
		n.undo()
		return err
	}
	n.o.Log.Info("cluster: joined", "cluster", st.Cluster, "via", addr, "etcd_member", st.Member)
	return nil
}

// ErrBadReply: a join reply this node does not take (checkReply).
var ErrBadReply = errors.New("join reply refused")

// checkReply checks a join reply before anything of it is written: its
// CA certificate must be the one the token pins, the node certificate
// the CA's, for this node's name, cluster address and key
// (pki.VerifyIssued); a CA key must be the CA certificate's; and the
// endpoints must be etcd client URLs, https://IP:port with nothing else.
// The endpoints are not checked further here: the etcd client trusts
// only the cluster CA and checks each endpoint's certificate against its
// IP, so an endpoint can only lead to a node the CA certified for it.
func checkReply(rep *JoinReply, pin, node string, ip net.IP, pub any) error {
	if _, err := pki.VerifyIssued([]byte(rep.CACert), []byte(rep.NodeCert), pin, node, ip, pub); err != nil {
		return fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	if rep.MemberID != "" {
		if _, err := strconv.ParseUint(rep.MemberID, 16, 64); err != nil {
			return fmt.Errorf("%w: member ID %q", ErrBadReply, rep.MemberID)
		}
		if _, err := pki.LoadCA([]byte(rep.CACert), []byte(rep.CAKey)); err != nil {
			return fmt.Errorf("%w: CA key: %w", ErrBadReply, err)
		}
		if rep.InitialCluster == "" {
			return fmt.Errorf("%w: a member without an initial cluster", ErrBadReply)
		}
	}
	if len(rep.Endpoints) == 0 {
		return fmt.Errorf("%w: no etcd endpoints", ErrBadReply)
	}
	for _, e := range rep.Endpoints {
		if err := checkEndpoint(e); err != nil {
			return fmt.Errorf("%w: etcd endpoint %q: %w", ErrBadReply, e, err)
		}
	}
	return nil
}

// checkEndpoint accepts an etcd client URL as members advertise it
// (Node.url): https://IP:port, no user, path, query or fragment.
func checkEndpoint(e string) error {
	u, err := url.Parse(e)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return errors.New("want https://IP:port")
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return errors.New("want https://IP:port")
	}
	return nil
}

// becomeMember starts the learner and promotes it. On failure the learner
// is removed again, so the next join can add a member.
func (n *Node) becomeMember(ctx context.Context, rep *JoinReply) error {
	var id uint64
	fmt.Sscanf(rep.MemberID, "%x", &id)
	t, err := n.files.ClientTLS()
	if err != nil {
		return err
	}
	peers, err := store.Connect(rep.Endpoints, t, n.o.Log)
	if err != nil {
		return err
	}
	defer peers.Close()
	fail := func(err error) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := peers.MemberRemove(rctx, id); rerr != nil {
			n.o.Log.Error("cluster: could not remove the learner of a failed join; remove it with fabraid cluster remove", "member", rep.MemberID, "err", rerr)
		}
		return err
	}
	if err := n.startMember(ctx, rep.InitialCluster); err != nil {
		return fail(err)
	}
	// The learner has just served: its log catches up in a few
	// round-trips, so the member bound covers the promotion too.
	pctx, cancel := context.WithTimeout(ctx, n.o.ReadyTimeout)
	defer cancel()
	if err := store.Promote(pctx, peers, t, n.o.Log, id); err != nil {
		return fail(err)
	}
	return nil
}

// postJoin sends q to the join service at addr from the local IP from
// (the joiner's cluster address: the join service certifies only the
// address a request comes from), accepting only a member certificate of
// the CA pinned by caFingerprint.
func postJoin(ctx context.Context, addr, from, caFingerprint string, q JoinRequest) (*JoinReply, error) {
	d := &net.Dialer{Timeout: 30 * time.Second}
	if ip := net.ParseIP(from); ip != nil {
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{
		InsecureSkipVerify:    true, // VerifyPeerCertificate pins the CA from the token
		VerifyPeerCertificate: pki.VerifyPinned(caFingerprint),
		MinVersion:            tls.VersionTLS12,
	}}
	defer tr.CloseIdleConnections()
	body, _ := json.Marshal(q)
	req, err := http.NewRequestWithContext(ctx, "POST", "https://"+addr+"/v1/join", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("cluster: join %s: %w", addr, err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("cluster: join %s: %w", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		json.Unmarshal(b, &e)
		return nil, fmt.Errorf("%w by %s: %s", ErrRefused, addr, e.Error)
	}
	var rep JoinReply
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("cluster: join %s: reply: %w", addr, err)
	}
	if rep.CAFingerprint != caFingerprint {
		return nil, fmt.Errorf("cluster: join %s: reply names CA %s, the token %s", addr, rep.CAFingerprint, caFingerprint)
	}
	return &rep, nil
}
