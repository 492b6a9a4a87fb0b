package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/pki"
	"github.com/fabraid/fabraid/internal/cluster/rbac"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/store"
	"github.com/fabraid/fabraid/internal/cluster/token"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// Errors callers map to answers.
var (
	// ErrNotInCluster: the node has no cluster state (run init or join).
	ErrNotInCluster = errors.New("this node is in no cluster (run fabraid cluster init or join)")
	// ErrInCluster: init or join on a node that is in a cluster already.
	ErrInCluster = errors.New("this node is in a cluster already")
	// ErrExternal: init and join are not used with external etcd.
	ErrExternal = errors.New("etcd_endpoints is set: nodes register with the external etcd at start; init and join are not used")
	// ErrRefused: the join service refused the request (wrapped with
	// its reason: a token error, a name in use, a membership change in
	// progress).
	ErrRefused = errors.New("join refused")
	// ErrAlive: remove of a node that is alive (it should leave).
	ErrAlive = errors.New("node is alive")
)

// Inventory is what a node reports about itself in the registry.
type Inventory struct {
	HostNQN          string
	StorageAddresses []string
	Drives           []registry.Drive
	// Exports and ExportsWhy are model.Node's: whether this node
	// exports, and why not.
	Exports, ExportsWhy string
	// NVMeTLS is model.Node's: what this node's drive ports offer.
	NVMeTLS string
}

// Options configure a Node.
type Options struct {
	Dir     string // state_dir/cluster
	Name    string // node name
	Domain  string // failure domain; default Name
	Address string // cluster IP address (etcd peer/client, join service)
	// Ports; 0 gives the defaults 2380, 2379 and 9437.
	PeerPort, ClientPort, JoinPort int
	// Members is the target number of voting etcd members (1, 3 or 5;
	// default 3): joining nodes become members until there are that many.
	Members int
	// External, when set, is the external etcd's client URLs and
	// ExternalTLS the client configuration (certificate required).
	External    []string
	ExternalTLS *tls.Config
	LeaseTTL    int // seconds; default 10
	// ReadyTimeout bounds the wait for the node's etcd member to serve at
	// Start, Init and Join (default store.DefaultReadyTimeout, 2 min);
	// StepTimeout bounds each etcd request of the registration (member
	// list, registry record, host key, lease; default 15 s).
	ReadyTimeout, StepTimeout time.Duration
	// TickMs and ElectionMs tune the embedded etcd (tests); 0: defaults.
	TickMs, ElectionMs uint
	Inventory          func() Inventory // nil: nothing to report
	Log                *slog.Logger
	Now                func() time.Time // default time.Now
}

// Node is this node's membership. See the package documentation.
//
// Locking: life serializes the lifecycle (Start, Init, Join, Leave,
// Close) and Refresh's registry writes, and is held across their etcd
// waits. mu guards the fields below it and is held only to read or write
// them, never across a wait, so InCluster, Client, Status and HostSecret
// answer at once while a Start waits for etcd. The fields are written
// only by a holder of life, under mu; a holder of life reads them without
// mu.
type Node struct {
	o     Options
	files pki.Files
	life  sync.Mutex
	// admitting serializes join admissions (one membership change at a
	// time from this node).
	admitting sync.Mutex

	mu   sync.Mutex
	st   *State
	srv  *store.Server
	cli  *clientv3.Client // set once the node is registered
	join *http.Server
	stop context.CancelFunc // ends the heartbeat loop
	// cancelStart ends the Start in progress (Close calls it); phase says
	// what the membership is waiting for while it is not up (Status).
	cancelStart context.CancelFunc
	phase       string
	// secret is the node's DH-HMAC-CHAP host secret, published at
	// registration (see hostKey); zero before.
	secret nvmf.Secret
	// ctrlSecret is its DH-HMAC-CHAP controller secret (CtrlKeyFile),
	// published with the host secret; zero before.
	ctrlSecret nvmf.Secret
	// ctrlPending: RotateCtrlSecret made ctrlSecret, and etcd keeps
	// ctrlPublished until PublishKeys (the hosts must not ask for the new
	// key before this node's target presents it).
	ctrlPending   bool
	ctrlPublished string
	// hostPending is the next host secret a host key rotation announced
	// (PendingHostKeyFile, published as model.HostKey.PendingSecret);
	// zero when none. secret stays the one in force until
	// PromoteHostSecret.
	hostPending nvmf.Secret

	loops sync.WaitGroup
	// crash makes the heartbeat loop stop renewing without revoking
	// the lease (tests: what a killed node looks like).
	crash bool
}

// New prepares a Node; nothing runs until Start, Init or Join.
func New(o Options) (*Node, error) {
	if o.Domain == "" {
		o.Domain = o.Name
	}
	if o.PeerPort == 0 {
		o.PeerPort = 2380
	}
	if o.ClientPort == 0 {
		o.ClientPort = 2379
	}
	if o.JoinPort == 0 {
		o.JoinPort = 9437
	}
	if o.Members == 0 {
		o.Members = 3
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 10
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = store.DefaultReadyTimeout
	}
	if o.StepTimeout <= 0 {
		o.StepTimeout = 15 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Inventory == nil {
		o.Inventory = func() Inventory { return Inventory{} }
	}
	return &Node{o: o, files: pki.Files{Dir: filepath.Join(o.Dir, "pki")}}, nil
}

func (n *Node) url(port int) string {
	return "https://" + net.JoinHostPort(n.o.Address, strconv.Itoa(port))
}

func (n *Node) etcdDir() string { return filepath.Join(n.o.Dir, "etcd") }

// InCluster says whether the node has cluster state (or uses external
// etcd), whether or not its membership is up yet.
func (n *Node) InCluster() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st != nil || len(n.o.External) > 0
}

// Client returns the node's etcd client, nil while the node is in no
// cluster or its membership is not up (Start retries). The client stays
// valid until Close, Leave or a failed Start; callers must not close it.
func (n *Node) Client() *clientv3.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cli
}

// Start brings up what the node's state asks for: its etcd member, the
// client, its registration and heartbeat, the join service. A node in no
// cluster starts nothing. Each wait is bounded (ReadyTimeout for the
// member, StepTimeout for each request) and a failed Start stops what it
// started, so the caller can retry; Close ends a Start in progress.
func (n *Node) Start(ctx context.Context) error {
	n.life.Lock()
	defer n.life.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n.mu.Lock()
	n.cancelStart = cancel
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.cancelStart = nil
		n.mu.Unlock()
	}()
	var err error
	if len(n.o.External) > 0 {
		err = n.startExternal(ctx)
	} else {
		var st *State
		if st, err = loadState(n.o.Dir); err != nil || st == nil {
			return err
		}
		n.mu.Lock()
		n.st = st
		n.mu.Unlock()
		if st.Member {
			err = n.startMember(ctx, st.InitialCluster)
		}
		if err == nil {
			err = n.connect(ctx)
		}
	}
	if err != nil {
		n.shutdown() // a later Start begins again from the state on disk
		n.setPhase("the last start failed (retried): " + err.Error())
	}
	return err
}

// setPhase records what the membership is doing while it is not up.
func (n *Node) setPhase(p string) {
	n.mu.Lock()
	n.phase = p
	n.mu.Unlock()
}

// step runs one etcd request of the registration, bounded by
// StepTimeout; its error names the step.
func (n *Node) step(ctx context.Context, what string, f func(context.Context) error) error {
	n.setPhase(what)
	sctx, cancel := context.WithTimeout(ctx, n.o.StepTimeout)
	defer cancel()
	err := f(sctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("cluster: %s: no answer from etcd in %s: %w", what, n.o.StepTimeout, err)
	}
	return fmt.Errorf("cluster: %s: %w", what, err)
}

func (n *Node) startExternal(ctx context.Context) error {
	cli, err := store.Connect(n.o.External, n.o.ExternalTLS, n.o.Log)
	if err != nil {
		return err
	}
	rec, _ := json.Marshal(Record{Version: StateVersion, Name: "fabraid", Created: n.o.Now().UTC()})
	if err := n.step(ctx, "write the cluster record to external etcd "+strings.Join(n.o.External, ","), func(ctx context.Context) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(keys.Cluster), "=", 0)).
			Then(clientv3.OpPut(keys.Cluster, string(rec))).Commit()
		return err
	}); err != nil {
		cli.Close()
		return err
	}
	n.mu.Lock()
	n.st = &State{Version: StateVersion, Cluster: "fabraid", Endpoints: n.o.External}
	n.mu.Unlock()
	return n.register(ctx, cli)
}

func (n *Node) startMember(ctx context.Context, initial string) error {
	n.setPhase(fmt.Sprintf("waiting for the etcd member to serve (at most %s; the daemon log says what it waits for)", n.o.ReadyTimeout))
	srv, err := store.Start(ctx, store.Config{
		Name: n.o.Name, Dir: n.etcdDir(), PeerURL: n.url(n.o.PeerPort), ClientURL: n.url(n.o.ClientPort),
		InitialCluster: initial, TLS: n.files, TickMs: n.o.TickMs, ElectionMs: n.o.ElectionMs,
		ReadyTimeout: n.o.ReadyTimeout, Log: n.o.Log,
	})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.srv = srv
	n.mu.Unlock()
	return nil
}

// connect dials etcd (own member first), refreshes the endpoints, and
// starts the registration, heartbeat and join service.
func (n *Node) connect(ctx context.Context) error {
	t, err := n.files.ClientTLS()
	if err != nil {
		return err
	}
	eps := n.st.Endpoints
	if n.st.Member {
		eps = append([]string{n.url(n.o.ClientPort)}, eps...)
	}
	cli, err := store.Connect(dedup(eps), t, n.o.Log)
	if err != nil {
		return err
	}
	// Serializable: the member list as the member the client reaches
	// knows it, without a read index from the leader; it only refreshes
	// the endpoints to dial next time. A linearizable MemberList that
	// gets "request timed out" is retried by the client (repeatable
	// policy, 100 attempts of up to etcd's request timeout each), so only
	// the step's deadline would end it.
	var ml *clientv3.MemberListResponse
	if err := n.step(ctx, "read the etcd member list", func(ctx context.Context) (err error) {
		ml, err = cli.MemberList(ctx, clientv3.WithSerializable())
		return err
	}); err != nil {
		n.o.Log.Warn("cluster: endpoints not refreshed", "err", err)
	} else {
		var fresh []string
		for _, m := range ml.Members {
			if !m.IsLearner {
				fresh = append(fresh, m.ClientURLs...)
			}
		}
		if len(fresh) > 0 {
			n.mu.Lock()
			n.st.Endpoints = fresh
			n.mu.Unlock()
			saveState(n.o.Dir, n.st)
		}
	}
	if err := n.register(ctx, cli); err != nil {
		return err
	}
	if n.st.Member {
		return n.serveJoins()
	}
	return nil
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// register writes the node's record and host key and starts the
// heartbeat loop with cli, then makes cli the node's client (Client). On
// an error cli is closed.
func (n *Node) register(ctx context.Context, cli *clientv3.Client) error {
	var hb *registry.Heartbeat
	err := n.step(ctx, "write the registry record", func(ctx context.Context) error { return n.putRecord(ctx, cli) })
	if err == nil {
		err = n.step(ctx, "publish the host key", func(ctx context.Context) error { return n.publishHostKey(ctx, cli) })
	}
	if err == nil {
		err = n.step(ctx, "take the heartbeat lease", func(ctx context.Context) (err error) {
			hb, err = registry.StartHeartbeat(ctx, cli, n.o.Name, n.o.LeaseTTL, os.Getpid(), n.o.Now())
			return err
		})
	}
	if err != nil {
		cli.Close()
		return err
	}
	hctx, cancel := context.WithCancel(context.Background())
	n.loops.Add(1)
	go n.heartbeatLoop(hctx, cli, hb)
	n.mu.Lock()
	n.cli, n.stop, n.phase = cli, cancel, ""
	n.mu.Unlock()
	n.o.Log.Info("cluster: registered", "node", n.o.Name, "lease_ttl_s", n.o.LeaseTTL)
	return nil
}

// RevokeTimeout bounds each lease revoke at shutdown. A revoke only
// hastens what the lease's expiry does anyway; a member without a leader
// refuses it at once, this bounds the window before it knows (a stop of
// the whole cluster: the last members lose quorum as the others go).
const RevokeTimeout = 5 * time.Second

// heartbeatLoop renews the node's liveness, taking a new lease whenever
// the old one is lost (etcd unreachable for longer than the TTL).
func (n *Node) heartbeatLoop(ctx context.Context, cli *clientv3.Client, hb *registry.Heartbeat) {
	defer n.loops.Done()
	for {
		select {
		case <-ctx.Done():
			if n.crash {
				hb.Abandon()
			} else {
				rctx, cancel := context.WithTimeout(context.Background(), RevokeTimeout)
				if err := hb.Close(rctx); err != nil {
					n.o.Log.Warn("cluster: node lease not revoked; it expires after its TTL", "ttl_s", n.o.LeaseTTL, "err", err)
				}
				cancel()
			}
			return
		case <-hb.Done():
		}
		n.o.Log.Warn("cluster: node lease lost; taking a new one")
		for {
			sctx, cancel := context.WithTimeout(ctx, n.o.StepTimeout)
			var err error
			hb, err = registry.StartHeartbeat(sctx, cli, n.o.Name, n.o.LeaseTTL, os.Getpid(), n.o.Now())
			cancel()
			if err == nil {
				n.o.Log.Info("cluster: node lease taken again")
				break
			}
			n.o.Log.Warn("cluster: cannot take a new node lease; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// putRecord registers the node's record from Inventory (registry.Register:
// its join time and controller-ID block are kept, and nothing is written
// when the stored record cannot be read).
func (n *Node) putRecord(ctx context.Context, cli *clientv3.Client) error {
	inv := n.o.Inventory()
	rec := registry.Node{
		Name: n.o.Name, Domain: n.o.Domain, HostNQN: inv.HostNQN, ClusterAddress: n.o.Address,
		StorageAddresses: inv.StorageAddresses, Drives: inv.Drives, Exports: inv.Exports, ExportsWhy: inv.ExportsWhy,
		NVMeTLS: inv.NVMeTLS,
	}
	if n.srv != nil {
		rec.EtcdMember = fmt.Sprintf("%x", n.srv.ID())
	}
	_, err := registry.Register(ctx, cli, rec, n.o.Now())
	return err
}

// Refresh rewrites the node's registry record from Inventory (drives
// claimed or released since). It does nothing while the node is in no
// cluster or its membership is not up, and while a lifecycle change
// (Start, Leave, ...) is in progress: that one writes the record itself,
// and Refresh must not wait for it (the daemon's reconcile calls it).
func (n *Node) Refresh(ctx context.Context) error {
	if !n.life.TryLock() {
		return nil
	}
	defer n.life.Unlock()
	if n.cli == nil {
		return nil
	}
	if err := n.step(ctx, "refresh the registry record", func(ctx context.Context) error { return n.putRecord(ctx, n.cli) }); err != nil {
		return err
	}
	return n.step(ctx, "refresh the host key", func(ctx context.Context) error { return n.publishHostKey(ctx, n.cli) })
}

// HostKeyFile is the node's DH-HMAC-CHAP host secret (DHHC-1 form, 0600)
// in Options.Dir.
const HostKeyFile = "dhchap.key"

// CtrlKeyFile is the node's DH-HMAC-CHAP controller secret (DHHC-1 form,
// 0600) in Options.Dir: what its nvmet presents to the hosts it exports
// to (bidirectional authentication).
const CtrlKeyFile = "dhchap_ctrl.key"

// publishHostKey makes the node's host and controller secrets once
// (files in Dir, 0600) and keeps them in etcd at keys.HostKey
// (volumes.EnsureNodeKeys): every exporter that allows this node's host
// NQN, drive exports and volume exports alike, takes the host key from
// there, every host that connects to this node's exports the controller
// key, and the node presents its host key when it connects and its
// controller key when it is connected to. The secrets are never logged.
func (n *Node) publishHostKey(ctx context.Context, cli *clientv3.Client) error {
	var sec, ctrl, pending nvmf.Secret
	local := func() (volumes.NodeKeys, error) {
		var err error
		if sec, err = loadOrMakeSecret(filepath.Join(n.o.Dir, HostKeyFile)); err != nil {
			return volumes.NodeKeys{}, err
		}
		if ctrl, err = loadOrMakeSecret(filepath.Join(n.o.Dir, CtrlKeyFile)); err != nil {
			return volumes.NodeKeys{}, fmt.Errorf("controller secret: %w", err)
		}
		k := volumes.NodeKeys{Host: sec.Reveal(), Ctrl: ctrl.Reveal()}
		if pending, err = loadPending(n.o.Dir); err != nil {
			return volumes.NodeKeys{}, err
		}
		if len(pending.Key) > 0 {
			k.Pending = pending.Reveal()
		}
		n.mu.Lock()
		if n.ctrlPending && n.ctrlPublished != "" {
			k.Ctrl = n.ctrlPublished // rotated, not presented yet
		}
		n.mu.Unlock()
		return k, nil
	}
	k, err := volumes.EnsureNodeKeys(ctx, cli, n.o.Name, local)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.secret, n.ctrlSecret, n.ctrlPublished, n.hostPending = sec, ctrl, k.Ctrl, pending
	if k.Ctrl == ctrl.Reveal() {
		n.ctrlPending = false
	}
	n.mu.Unlock()
	return nil
}

// RotateCtrlSecret replaces the node's DH-HMAC-CHAP controller secret
// with a new one (CtrlKeyFile, replaced atomically): CtrlSecret returns it
// at once, so the next reconcile puts it on this node's nvmet host
// entries, but etcd keeps the old one (CtrlPending) until PublishKeys,
// which the daemon calls once its target presents the new key: a host
// that re-authenticates with it before would be refused and reconnect
// (docs/cluster.md, "Key rotation"). Live connections are not touched.
func (n *Node) RotateCtrlSecret() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cli == nil || len(n.ctrlSecret.Key) == 0 {
		return ErrNotInCluster
	}
	s, err := nvmf.GenerateSecret(32)
	if err != nil {
		return err
	}
	if err := nvmf.SaveSecret(filepath.Join(n.o.Dir, CtrlKeyFile), s); err != nil {
		return fmt.Errorf("cluster: save the new controller secret: %w", err)
	}
	if !n.ctrlPending {
		n.ctrlPublished = n.ctrlSecret.Reveal()
	}
	n.ctrlSecret, n.ctrlPending = s, true
	n.o.Log.Info("cluster: DH-HMAC-CHAP controller secret rotated; published once the target presents it")
	return nil
}

// CtrlPending reports whether a rotated controller secret is not in etcd
// yet (RotateCtrlSecret).
func (n *Node) CtrlPending() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ctrlPending
}

// PublishKeys writes the node's current host and controller secrets to
// etcd (a rotated controller secret included) and ends CtrlPending.
func (n *Node) PublishKeys(ctx context.Context) error {
	n.mu.Lock()
	cli := n.cli
	n.ctrlPending = false
	n.mu.Unlock()
	if cli == nil {
		return ErrNotInCluster
	}
	if err := n.publishHostKey(ctx, cli); err != nil {
		n.mu.Lock()
		n.ctrlPending = true
		n.mu.Unlock()
		return err
	}
	return nil
}

// loadOrMakeSecret loads the secret in path (0600, nvmf.LoadSecret) or,
// when there is none, makes one and saves it.
func loadOrMakeSecret(path string) (nvmf.Secret, error) {
	s, err := nvmf.LoadSecret(path)
	if errors.Is(err, os.ErrNotExist) {
		if s, err = nvmf.GenerateSecret(32); err == nil {
			err = nvmf.SaveSecret(path, s)
		}
	}
	return s, err
}

// HostSecret is the node's DH-HMAC-CHAP host secret (ok false before the
// node has registered). It prints redacted; Reveal gives the key for
// configfs and connect options.
func (n *Node) HostSecret() (nvmf.Secret, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.secret, len(n.secret.Key) > 0
}

// CtrlSecret is the node's DH-HMAC-CHAP controller secret, what its nvmet
// presents to the hosts (ok false before the node has registered). It
// prints redacted.
func (n *Node) CtrlSecret() (nvmf.Secret, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ctrlSecret, len(n.ctrlSecret.Key) > 0
}

// Init makes a new cluster named name with this node as its first etcd
// member.
func (n *Node) Init(ctx context.Context, name string) error {
	n.life.Lock()
	defer n.life.Unlock()
	if err := n.checkFree(); err != nil {
		return err
	}
	if name == "" {
		name = "fabraid"
	}
	now := n.o.Now()
	ca, err := pki.NewCA(name, now)
	if err != nil {
		return err
	}
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return err
	}
	cert, err := ca.Issue(key.Public(), n.o.Name, []net.IP{net.ParseIP(n.o.Address)}, now)
	if err != nil {
		return err
	}
	if err := n.files.Write(ca.CertPEM, cert, keyPEM, ca.KeyPEM); err != nil {
		return err
	}
	st := &State{Cluster: name, CAFingerprint: pki.Fingerprint(ca.Cert), Member: true, Members: n.o.Members, Endpoints: []string{n.url(n.o.ClientPort)}, Joined: now.UTC()}
	if err := n.startMember(ctx, ""); err != nil {
		n.undo()
		return err
	}
	st.MemberID = fmt.Sprintf("%x", n.srv.ID())
	st.InitialCluster = n.o.Name + "=" + n.url(n.o.PeerPort)
	n.mu.Lock()
	n.st = st
	n.mu.Unlock()
	if err := n.bootstrap(ctx, Record{Version: StateVersion, Name: name, CAFingerprint: st.CAFingerprint, Members: n.o.Members, Created: now.UTC()}); err != nil {
		n.undo()
		return err
	}
	n.o.Log.Info("cluster: initialized", "cluster", name, "node", n.o.Name, "ca_sha256", st.CAFingerprint)
	return nil
}

func (n *Node) bootstrap(ctx context.Context, rec Record) error {
	if err := n.connect(ctx); err != nil {
		return err
	}
	b, _ := json.Marshal(rec)
	if err := n.step(ctx, "write the cluster record", func(ctx context.Context) error {
		_, err := n.cli.Put(ctx, keys.Cluster, string(b))
		return err
	}); err != nil {
		return err
	}
	// Least privilege in etcd (package rbac): this member's user is
	// etcd's root, every later node gets its user from the join
	// service, and authentication goes on before any other node has a
	// certificate.
	if err := n.step(ctx, "enable etcd authentication", func(ctx context.Context) error {
		return rbac.Enable(ctx, n.cli, []string{n.o.Name}, nil)
	}); err != nil {
		return err
	}
	return saveState(n.o.Dir, n.st)
}

func (n *Node) checkFree() error {
	if len(n.o.External) > 0 {
		return ErrExternal
	}
	if n.st != nil {
		return fmt.Errorf("%w (%s)", ErrInCluster, n.st.Cluster)
	}
	if st, err := loadState(n.o.Dir); err != nil || st != nil {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w (%s; state in %s)", ErrInCluster, st.Cluster, n.o.Dir)
	}
	if n.o.Address == "" || net.ParseIP(n.o.Address) == nil {
		return fmt.Errorf("cluster: no cluster address: set cluster_address (or storage_cidrs) in the configuration")
	}
	return nil
}

// undo stops what a failed Init or Join started and removes its files.
func (n *Node) undo() {
	n.shutdown()
	n.mu.Lock()
	n.st = nil
	n.mu.Unlock()
	os.RemoveAll(n.o.Dir)
}

// shutdown stops the heartbeat (revoking the lease), the join service,
// the client and the member; the state on disk is kept. The caller holds
// life.
func (n *Node) shutdown() {
	n.stopHeartbeat()
	n.mu.Lock()
	join, cli, srv := n.join, n.cli, n.srv
	n.join, n.cli, n.srv = nil, nil, nil
	n.secret, n.ctrlSecret = nvmf.Secret{}, nvmf.Secret{}
	n.mu.Unlock()
	if join != nil {
		join.Close()
	}
	if cli != nil {
		cli.Close()
	}
	if srv != nil {
		srv.Close()
	}
}

// stopHeartbeat ends the heartbeat loop, which revokes the lease (unless
// crash). The caller holds life.
func (n *Node) stopHeartbeat() {
	n.mu.Lock()
	stop := n.stop
	n.stop = nil
	n.mu.Unlock()
	if stop != nil {
		stop()
		n.loops.Wait()
	}
}

// Close stops everything the node runs, ending a Start in progress first;
// the node stays in its cluster (its lease is revoked: it shows as dead
// until it starts again).
func (n *Node) Close() {
	n.mu.Lock()
	cancel := n.cancelStart
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	n.life.Lock()
	defer n.life.Unlock()
	n.shutdown()
}

// Token makes a join token valid for ttl, at most model.MaxTokenTTL.
func (n *Node) Token(ctx context.Context, ttl time.Duration) (token.Token, error) {
	n.mu.Lock()
	cli, st := n.cli, n.st
	n.mu.Unlock()
	if cli == nil {
		return token.Token{}, ErrNotInCluster
	}
	if len(n.o.External) > 0 {
		return token.Token{}, ErrExternal
	}
	t, err := token.New(st.CAFingerprint)
	if err != nil {
		return token.Token{}, err
	}
	if err := n.issueToken(ctx, cli, t, ttl); err != nil {
		return token.Token{}, err
	}
	n.o.Log.Info("cluster: join token made", "token", t, "ttl", ttl.String())
	return t, nil
}
