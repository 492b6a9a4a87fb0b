// Package store runs fabraid's embedded etcd member and changes etcd's
// membership.
//
// # Members
//
// "fabraid cluster init" starts the first member (Start with no
// InitialCluster: a new one-member cluster). A node that joins while the
// cluster has fewer voting members than its target (1, 3 or 5) becomes a
// member the way etcd's runtime-reconfiguration guide asks: the cluster
// adds it as a learner (AddLearner, which also gives the initial-cluster
// string it must start with), it starts with ClusterState existing, and
// once its log has caught up it is promoted (Promote). etcd allows one
// learner at a time, so membership changes one member at a time. Every
// other node is only a client.
//
// Remove refuses to shrink a cluster of two voting members (with two,
// quorum is both: a change made while either is unavailable cannot
// commit) and to remove the last member, unless forced.
//
// # TLS
//
// Peer and client traffic use TLS with the cluster CA (package pki);
// client certificates are required on both ports, so a process without a
// node certificate cannot read or write etcd. The peer port takes only
// member certificates (CN pki.MemberCN; Start makes the member's own from
// the CA key when it has none): client-only nodes cannot reach raft.
package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/pki"
)

// Config describes the local member.
type Config struct {
	Name      string // etcd member name: the node name
	Dir       string // data directory
	PeerURL   string // https://ip:port, listened on and advertised
	ClientURL string // https://ip:port, listened on and advertised
	// InitialCluster is "name=peerURL,..." for a member that joins an
	// existing cluster (from AddLearner); empty starts a new cluster of
	// this one member. Ignored by etcd once Dir holds data (restart).
	InitialCluster string
	TLS            pki.Files
	// TickMs and ElectionMs are etcd's heartbeat and election timeout;
	// 0 keeps etcd's defaults (100 ms, 1000 ms).
	TickMs, ElectionMs uint
	// ReadyTimeout bounds Start's wait for the member to serve
	// (DefaultReadyTimeout when 0); ProgressEvery is how often Start logs
	// what the member is waiting for meanwhile (15 s when 0).
	ReadyTimeout, ProgressEvery time.Duration
	// Log receives Start's progress and etcd's own warnings and errors
	// (rate-limited, see EtcdLogger); nil: slog.Default().
	Log *slog.Logger
}

// DefaultReadyTimeout is how long Start waits for a member to serve: a
// restarted member needs a leader and one committed proposal (etcd
// publishes the member's attributes through raft before it serves).
const DefaultReadyTimeout = 2 * time.Minute

// Server is a running embedded member.
type Server struct {
	e  *embed.Etcd
	gs *servers
}

// servers are a member's client gRPC servers. They are stopped (every
// connection closed, and, with grpc.WaitForHandlers, every handler
// returned) before the member itself: with etcd's authentication on,
// a request's permission check reads the member's backend (a lease
// keepalive's too, in LeaseRenew), and one that arrives after
// EtcdServer.Stop closed the backend panics in bbolt and takes the whole
// daemon down (seen in this package's tests). embed.Etcd.Close stops
// them first as well, but waits up to etcd's request timeout for the
// open watch and keepalive streams of other nodes; Stop ends them at
// once. When etcd stops the member by itself (it was removed), the
// servers are stopped when it begins to stop, racing its backend's
// close: narrower, not closed.
type servers struct {
	mu      sync.Mutex
	gs      []*grpc.Server
	stopped bool
}

func (s *servers) add(g *grpc.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gs = append(s.gs, g)
	if s.stopped {
		go g.Stop()
	}
}

func (s *servers) stop() {
	s.mu.Lock()
	s.stopped = true
	gs := s.gs
	s.mu.Unlock()
	for _, g := range gs {
		g.Stop()
	}
}

// Start starts the member and waits until it serves, at most
// ReadyTimeout, logging every ProgressEvery what it waits for. A member
// that does not serve in time, or whose ctx ends, is stopped and its
// ports are closed before Start returns, so a retry can bind them again.
func Start(ctx context.Context, c Config) (*Server, error) {
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	if err := checkSpace(c.Dir); err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	pu, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("store: peer URL: %w", err)
	}
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("store: client URL: %w", err)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	if c.InitialCluster == "" {
		cfg.InitialCluster = c.Name + "=" + c.PeerURL
		cfg.ClusterState = embed.ClusterStateFlagNew
	} else {
		cfg.InitialCluster = c.InitialCluster
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	// The peer (raft) port takes member certificates only: AllowedCNs
	// makes etcd refuse, both when it accepts and when it dials, a
	// certificate whose CN is not pki.MemberCN, so a node with only a node
	// certificate (any client) cannot speak raft or read the peer API.
	// A member whose files predate member certificates makes its own here
	// (it has the CA key).
	if err := c.TLS.EnsureMember(c.Name, net.ParseIP(pu.Hostname()), time.Now()); err != nil {
		return nil, fmt.Errorf("store: member certificate of %s: %w", c.Name, err)
	}
	cfg.PeerTLSInfo = transport.TLSInfo{CertFile: c.TLS.MemberCert(), KeyFile: c.TLS.MemberKey(), TrustedCAFile: c.TLS.CACert(),
		ClientCertAuth: true, AllowedCNs: []string{pki.MemberCN}}
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: c.TLS.NodeCert(), KeyFile: c.TLS.NodeKey(), TrustedCAFile: c.TLS.CACert(), ClientCertAuth: true}
	// Keep one hour of history (etcd compacts nothing by default).
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "1h"
	if c.TickMs != 0 {
		cfg.TickMs, cfg.ElectionMs = c.TickMs, c.ElectionMs
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(EtcdLogger(log))
	cfg.Logger = "zap"
	// The client gRPC servers are stopped before the member (see
	// servers): embed calls ServiceRegister with each one it makes.
	gs := &servers{}
	cfg.ServiceRegister = gs.add
	cfg.GRPCAdditionalServerOptions = []grpc.ServerOption{grpc.WaitForHandlers(true)}
	began := time.Now()
	e, err := startEtcd(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("store: start etcd member %s: %w", c.Name, err)
	}
	go func() {
		// etcd stops a member by itself too (its removal): stop the
		// client servers as soon as it begins.
		select {
		case <-e.Server.StoppingNotify():
			gs.stop()
		case <-e.Server.StopNotify():
		}
	}()
	halt := func(e *embed.Etcd) { gs.stop(); stop(e) }
	timeout, every := c.ReadyTimeout, c.ProgressEvery
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	if every <= 0 {
		every = 15 * time.Second
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-e.Server.ReadyNotify():
			log.Info("cluster: etcd member serving", "member", c.Name, "took", time.Since(began).Round(time.Millisecond).String())
			return &Server{e: e, gs: gs}, nil
		case err := <-e.Err():
			halt(e)
			return nil, fmt.Errorf("store: etcd member %s: %w", c.Name, err)
		case <-tick.C:
			log.Warn("cluster: etcd member not serving yet", append([]any{"member", c.Name, "waited", time.Since(began).Round(time.Second).String()}, progress(e)...)...)
		case <-deadline.C:
			p := progress(e)
			halt(e)
			return nil, fmt.Errorf("store: etcd member %s not serving after %s (%s): %w", c.Name, timeout, describe(p), ErrNotReady)
		case <-ctx.Done():
			halt(e)
			return nil, fmt.Errorf("store: etcd member %s not serving: %w", c.Name, ctx.Err())
		}
	}
}

// ErrNotReady is wrapped by Start when the member did not serve within
// its ReadyTimeout.
var ErrNotReady = errors.New("etcd member not ready")

// stop stops a member whether or not it became ready. embed.Etcd.Close
// alone waits for the client servers, which start only once the member
// is ready (etcd #9533): stopping the server first releases them.
func stop(e *embed.Etcd) {
	e.Server.Stop()
	e.Close()
}

// progress is what a member that does not serve yet is waiting for, as
// slog key/value pairs: the leader it knows (none: it has not heard from
// a quorum), raft term and indexes (applied behind committed: replaying
// or catching up; equal with a leader: its publish proposal has not
// committed), the peers its raft transport reaches, and the members.
func progress(e *embed.Etcd) []any {
	s := e.Server
	lead := "none"
	if l := s.Leader(); l != 0 {
		lead = l.String()
	}
	self := s.MemberID()
	var members []string
	for _, m := range s.Cluster().Members() {
		n := m.Name
		if n == "" {
			n = "(unstarted)"
		}
		if m.IsLearner {
			n += "(learner)"
		}
		if m.ID == self {
			n += "(self)"
		}
		members = append(members, n+"="+m.ID.String())
	}
	sort.Strings(members)
	return []any{"leader", lead, "term", s.Term(), "committed", s.CommittedIndex(), "applied", s.AppliedIndex(),
		"peers_active", activePeers(self.String()), "members", strings.Join(members, ",")}
}

// activePeers lists the peers (IDs) whose raft streams are up from member
// local, from rafthttp's etcd_network_active_peers gauge (the transport
// itself is not exported).
func activePeers(local string) string {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return "unknown"
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "etcd_network_active_peers" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l, r string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "Local":
					l = lp.GetValue()
				case "Remote":
					r = lp.GetValue()
				}
			}
			if l == local && m.GetGauge().GetValue() > 0 {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// describe renders progress pairs as "k v, k v" for an error message.
func describe(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v %v", kv[i], kv[i+1])
	}
	return b.String()
}

// ID is the member's etcd ID.
func (s *Server) ID() uint64 { return uint64(s.e.Server.MemberID()) }

// Err reports a fatal error of the running member.
func (s *Server) Err() <-chan error { return s.e.Err() }

// Close stops the member.
func (s *Server) Close() {
	s.gs.stop()
	stop(s.e)
}

// Connect returns a client of endpoints that presents the node
// certificate; its warnings go to log (rate-limited; nil: none).
func Connect(endpoints []string, t *tls.Config, log *slog.Logger) (*clientv3.Client, error) {
	zl := zap.NewNop()
	if log != nil {
		zl = EtcdLogger(log)
	}
	// Keep-alive pings find a connection to a member whose node lost
	// power (no RST ever comes): without them a request balanced onto it
	// hangs until TCP gives up, minutes later. 5 s is the least etcd's
	// server accepts (GRPCKeepAliveMinTime) before it sends GOAWAY.
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: t, DialTimeout: 5 * time.Second, AutoSyncInterval: 30 * time.Second,
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second, Logger: zl})
	if err != nil {
		return nil, fmt.Errorf("store: connect %v: %w", endpoints, err)
	}
	return cli, nil
}

// AddLearner adds the member name at peerURL as a learner and returns its
// ID and the initial-cluster string it must start with. etcd refuses a
// second learner (ErrTooManyLearners): one change at a time.
func AddLearner(ctx context.Context, cli *clientv3.Client, name, peerURL string) (uint64, string, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("store: member list: %w", err)
	}
	for _, m := range ml.Members {
		if m.IsLearner {
			return 0, "", fmt.Errorf("store: member %s is still a learner; one membership change at a time, retry when it is promoted", memberName(m))
		}
		if m.Name == name || slices.Contains(m.PeerURLs, peerURL) {
			return 0, "", fmt.Errorf("store: a member named %s or at %s exists already (id %x)", name, peerURL, m.ID)
		}
	}
	// With strict reconfiguration checks etcd refuses a change until
	// every voting member has been connected for 5 s (HealthInterval),
	// as right after a promotion: wait that out.
	var resp *clientv3.MemberAddResponse
	for {
		resp, err = cli.MemberAddAsLearner(ctx, []string{peerURL})
		if err == nil {
			break
		}
		if !isErr(err, rpctypes.ErrUnhealthy) && !isErr(err, rpctypes.ErrMemberNotEnoughStarted) {
			return 0, "", fmt.Errorf("store: add learner %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return 0, "", fmt.Errorf("store: add learner %s: %w (%v)", name, err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	var parts []string
	for _, m := range resp.Members {
		n := m.Name
		if m.ID == resp.Member.ID {
			n = name
		}
		if n == "" { // a member added but not started yet
			continue
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return resp.Member.ID, strings.Join(parts, ","), nil
}

// Promote promotes the learner id to a voting member, retrying while etcd
// says its log has not caught up (or a leader change got in the way),
// until ctx ends.
//
// The request goes to the leader's client URL, dialled with t: a member
// that is not the leader forwards a promote to the leader over the peer
// API without the caller's identity, and with etcd's authentication on
// (package rbac) the leader refuses it ("user name is empty") until the
// request times out (etcd #20757; its fix forwards a password token, not
// the identity of a client certificate).
func Promote(ctx context.Context, cli *clientv3.Client, t *tls.Config, log *slog.Logger, id uint64) error {
	for {
		err := promoteAtLeader(ctx, cli, t, log, id)
		if err == nil {
			return nil
		}
		if !isErr(err, rpctypes.ErrMemberLearnerNotReady) && !isErr(err, rpctypes.ErrTimeout) &&
			!isErr(err, rpctypes.ErrLeaderChanged) && !isErr(err, rpctypes.ErrNoLeader) && !isErr(err, rpctypes.ErrNotLeader) {
			return fmt.Errorf("store: promote %x: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: promote %x: %w (%v)", id, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// promoteAtLeader sends one promote of id to the leader (found by asking
// each voting member's status), or through cli when no member says it
// leads.
func promoteAtLeader(ctx context.Context, cli *clientv3.Client, t *tls.Config, log *slog.Logger, id uint64) error {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return err
	}
	leader := ""
	for _, m := range ml.Members {
		if m.IsLearner || len(m.ClientURLs) == 0 {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.ClientURLs[0])
		cancel()
		if err == nil && st.Leader == m.ID {
			leader = m.ClientURLs[0]
			break
		}
	}
	if leader == "" || t == nil {
		_, err := cli.MemberPromote(ctx, id)
		return err
	}
	lc, err := Connect([]string{leader}, t, log)
	if err != nil {
		return err
	}
	defer lc.Close()
	_, err = lc.MemberPromote(ctx, id)
	return err
}

// ErrShrink is wrapped by CheckRemove and Remove when the change would
// leave no safe quorum.
var ErrShrink = errors.New("membership change refused")

// CheckRemove says whether Remove(id) would be refused, changing nothing.
// It refuses to remove the last voting member and to shrink two voting
// members to one. found is false when id is no member.
func CheckRemove(ctx context.Context, cli *clientv3.Client, id uint64) (found bool, err error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return false, fmt.Errorf("store: member list: %w", err)
	}
	voting, learner := 0, false
	for _, m := range ml.Members {
		if !m.IsLearner {
			voting++
		}
		if m.ID == id {
			found, learner = true, m.IsLearner
		}
	}
	switch {
	case !found || learner:
		return found, nil
	case voting == 1:
		return true, fmt.Errorf("%w: this is the last etcd member; removing it ends the cluster", ErrShrink)
	case voting == 2:
		return true, fmt.Errorf("%w: the cluster has 2 voting etcd members; removing one while the other may be unavailable loses quorum (add a member first)", ErrShrink)
	}
	return true, nil
}

// Remove removes member id, after CheckRemove unless force.
func Remove(ctx context.Context, cli *clientv3.Client, id uint64, force bool) error {
	found, err := CheckRemove(ctx, cli, id)
	if err != nil && !force {
		return err
	}
	if !found {
		return nil
	}
	if _, err := cli.MemberRemove(ctx, id); err != nil {
		return fmt.Errorf("store: remove member %x: %w", id, err)
	}
	return nil
}

// MemberStatus is one etcd member as seen by Members (package model).
type MemberStatus = model.MemberStatus

// Members lists the members with their health: a member is healthy when
// its client URL answers a status request within timeout.
func Members(ctx context.Context, cli *clientv3.Client, timeout time.Duration) ([]MemberStatus, error) {
	// Serializable: the member this client talks to answers from its own
	// state, so the list (and each member's health) is available without a
	// quorum, which is when an admin needs it most.
	ml, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, fmt.Errorf("store: member list: %w", err)
	}
	out := make([]MemberStatus, 0, len(ml.Members))
	for _, m := range ml.Members {
		ms := MemberStatus{ID: fmt.Sprintf("%x", m.ID), Name: memberName(m), PeerURLs: m.PeerURLs, ClientURL: m.ClientURLs, Learner: m.IsLearner}
		if len(m.ClientURLs) == 0 {
			ms.Error = "not started"
		} else {
			sctx, cancel := context.WithTimeout(ctx, timeout)
			st, err := cli.Status(sctx, m.ClientURLs[0])
			cancel()
			if err != nil {
				ms.Error = err.Error()
			} else {
				ms.Healthy = len(st.Errors) == 0
				ms.Error = strings.Join(st.Errors, "; ")
				ms.Leader = st.Leader == m.ID
				ms.RaftIndex = st.RaftIndex
			}
		}
		out = append(out, ms)
	}
	return out, nil
}

func memberName(m interface{ GetName() string }) string {
	if n := m.GetName(); n != "" {
		return n
	}
	return "(unstarted)"
}

// isErr matches an etcd server error however the client wrapped it.
func isErr(err, target error) bool {
	return errors.Is(err, target) || strings.Contains(err.Error(), target.Error())
}
