package owner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// startEtcd runs a one-member etcd in-process (plain TCP on loopback; the
// product's TLS setup is tested in package cluster) and returns its client
// address.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "m"
	cfg.Dir = t.TempDir()
	// Port 0: the kernel picks free ports at bind time (no race with
	// other tests for a port found free earlier); one member never dials
	// its own peer URL.
	pu, _ := url.Parse("http://127.0.0.1:0")
	cu, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = "m=" + pu.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.Logger = "zap"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready")
	}
	return e.Clients[0].Addr().String()
}

func client(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// proxy relays TCP between a client and etcd, delaying etcd's answers by
// lag, until cut; after the cut it blackholes both directions (bytes are
// read and dropped, nothing is refused), as a network partition looks to
// both ends.
type proxy struct {
	ln  net.Listener
	lag time.Duration
	cut atomic.Bool
	mu  sync.Mutex
	cs  []net.Conn
}

func newProxy(t *testing.T, upstream string, lag time.Duration) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, lag: lag}
	t.Cleanup(p.close)
	go p.serve(upstream)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve(upstream string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.cut.Load() {
			go p.relay(io.Discard, c)
			continue
		}
		u, err := net.Dial("tcp", upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.track(u)
		go p.relay(u, c)
		go p.relayLagged(c, u)
	}
}

// relayLagged relays src to dst, each chunk lag after it was read.
func (p *proxy) relayLagged(dst io.Writer, src net.Conn) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 4096)
	go func() {
		for c := range ch {
			time.Sleep(time.Until(c.at))
			if p.cut.Load() {
				continue
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(ch)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		ch <- chunk{time.Now().Add(p.lag), buf[:n]}
	}
}

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	p.cs = append(p.cs, c)
	p.mu.Unlock()
}

func (p *proxy) relay(dst io.Writer, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if p.cut.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cs {
		c.Close()
	}
}

// Ownership: only a free volume can be acquired, the holder is named, a
// takeover gets a larger epoch, Resign only deletes its own epoch's key,
// and closing a Session revokes its lease (its keys go at once).
func TestAcquireEpochs(t *testing.T) {
	addr := startEtcd(t)
	ctx := ctxT(t)
	cli := client(t, addr)
	a, err := NewSession(ctx, cli, Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSession(ctx, cli, Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const vol = "0d7f3a52-6b1e-4c1a-9a57-3c4f8c2b9e01"
	if _, _, ok, err := Current(ctx, cli, vol); ok || err != nil {
		t.Fatalf("current of a new volume: ok %v err %v", ok, err)
	}
	e1, err := Acquire(ctx, a, vol, "a")
	if err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := Acquire(ctx, b, vol, "b"); !errors.As(err, &held) || held.Node != "a" || held.Epoch != e1 || !errors.Is(err, ErrHeld) {
		t.Fatalf("acquire of an owned volume: %v", err)
	}
	if _, err := Acquire(ctx, a, vol, "a"); !errors.As(err, &held) {
		t.Fatalf("second acquire by the owner: %v", err)
	}
	rec, ep, ok, err := Current(ctx, cli, vol)
	if err != nil || !ok || rec.Node != "a" || ep != e1 || rec.Lease != fmt.Sprintf("%x", a.Lease()) {
		t.Fatalf("current: %+v %d %v %v", rec, ep, ok, err)
	}
	if err := Resign(ctx, cli, vol, e1); err != nil {
		t.Fatal(err)
	}
	e2, err := Acquire(ctx, b, vol, "b")
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Fatalf("takeover epoch %d not above %d", e2, e1)
	}
	// a's stale resign must not delete b's key.
	if err := Resign(ctx, cli, vol, e1); !errors.As(err, &held) || held.Node != "b" {
		t.Fatalf("stale resign: %v", err)
	}
	if _, ep, ok, _ := Current(ctx, cli, vol); !ok || ep != e2 {
		t.Fatalf("after a stale resign: owner epoch %d ok %v, want %d", ep, ok, e2)
	}
	// Close revokes: the volume is free at once, a takes it back with a
	// larger epoch on a new session.
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Fenced():
	default:
		t.Fatal("closed session not fenced")
	}
	if _, err := Acquire(ctx, b, vol, "b"); !errors.Is(err, ErrFenced) {
		t.Fatalf("acquire on a closed session: %v", err)
	}
	if err := WaitFree(ctx, cli, vol); err != nil {
		t.Fatal(err)
	}
	e3, err := Acquire(ctx, a, vol, "a")
	if err != nil || e3 <= e2 {
		t.Fatalf("acquire after revoke: %d %v (previous %d)", e3, err, e2)
	}
	a.Close(ctx)
}

type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(format string, args ...any) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, fmt.Sprintf(format, args...))
	return len(e.log) - 1
}

// A partitioned owner (its client connection to etcd blackholed) reaches
// its self-fence deadline while its lease still lives at the server, and
// before the lease expires there and another node's Acquire succeeds. The
// order is checked at the server: at the fence the lease still has TTL
// left and the owner key is the old owner's; the key's deletion and the
// takeover come after. etcd's answers reach the owner 0.8 s late, so a
// deadline counted from the answer instead of the send would come 0.8 s
// later and fail the TTL check.
func TestPartitionedOwnerFencesFirst(t *testing.T) {
	addr := startEtcd(t)
	ctx := ctxT(t)
	p := newProxy(t, addr, 800*time.Millisecond)
	cliA := client(t, p.addr())                         // the owner, through the cuttable link
	cliB := client(t, addr)                             // the other node and the observer
	if _, err := cliA.Get(ctx, "warm-up"); err != nil { // connect before the lease is granted
		t.Fatal(err)
	}
	const vol = "5b8e1c2d-0f3a-4e6b-8c7d-1a2b3c4d5e6f"
	var ev events
	type atFence struct {
		idx     int
		ttl     int64
		present bool
		rev     int64
	}
	fenceSeen := make(chan atFence, 1)
	var sess *Session
	// The lease's TTL at the server is read at the fence: TimeToLive
	// reports whole seconds rounded down, so TTL >= 1 proves the lease
	// had at least a second left. StopBudget 1.5 s leaves that second
	// plus 0.54 s for the fence to run late on a loaded host.
	ready := make(chan struct{})
	sess, err := NewSession(ctx, cliA, Options{TTL: 4 * time.Second, StopBudget: 1500 * time.Millisecond, OnFence: func() {
		<-ready
		i := ev.add("fence")
		f := atFence{idx: i, ttl: -1}
		if r, err := cliB.TimeToLive(ctx, sess.Lease()); err == nil {
			f.ttl = r.TTL
		}
		if r, err := cliB.Get(ctx, keys.Owner(vol)); err == nil && len(r.Kvs) == 1 {
			f.present, f.rev = true, r.Kvs[0].CreateRevision
		}
		fenceSeen <- f
	}})
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	eA, err := Acquire(ctx, sess, vol, "a")
	if err != nil {
		t.Fatal(err)
	}
	deleted := make(chan int, 1)
	wch := cliB.Watch(ctx, keys.Owner(vol), clientv3.WithRev(int64(eA)+1))
	go func() {
		for wr := range wch {
			for _, e := range wr.Events {
				if e.Type == mvccpb.DELETE {
					deleted <- ev.add("key deleted at the server")
					return
				}
			}
		}
	}()
	type took struct {
		idx     int
		epoch   Epoch
		refused int
	}
	takeover := make(chan took, 1)
	other, err := NewSession(ctx, cliB, Options{TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	go func() {
		refused := 0
		for ctx.Err() == nil {
			e, err := Acquire(ctx, other, vol, "b")
			if err == nil {
				takeover <- took{ev.add("b acquired"), e, refused}
				return
			}
			if !errors.Is(err, ErrHeld) {
				t.Errorf("b: %v", err)
				return
			}
			refused++
			// Wait for the key to go, then try again.
			if err := WaitFree(ctx, cliB, vol); err != nil {
				t.Errorf("b: %v", err)
				return
			}
		}
	}()
	// Let a renew a few times through the proxy, then cut it.
	for first, n := sess.Deadline(), 0; n < 2; {
		if dl := sess.Deadline(); dl.After(first) {
			first, n = dl, n+1
		}
		time.Sleep(20 * time.Millisecond) // polling only; no timing is asserted
	}
	select {
	case <-sess.Fenced():
		t.Fatal("fenced while connected")
	default:
	}
	ev.add("cut")
	p.cut.Store(true)

	f := <-fenceSeen
	d := <-deleted
	tk := <-takeover
	t.Logf("events: %v; lease TTL at the server at the fence %d s", ev.log, f.ttl)
	if f.idx != 1 || f.idx > d || d > tk.idx {
		t.Fatalf("order of events %v: want cut, fence, key deleted, b acquired", ev.log)
	}
	if f.ttl < 1 {
		t.Fatalf("at the fence the lease had TTL %d at the server: it may have expired before the owner fenced", f.ttl)
	}
	if !f.present || Epoch(f.rev) != eA {
		t.Fatalf("at the fence the owner key was present %v at epoch %d, want a's %d", f.present, f.rev, eA)
	}
	if tk.refused < 1 || tk.epoch <= eA {
		t.Fatalf("takeover after %d refusals at epoch %d (a's %d)", tk.refused, tk.epoch, eA)
	}
	if _, err := Acquire(ctx, sess, vol, "a"); !errors.Is(err, ErrFenced) {
		t.Fatalf("acquire by the fenced owner: %v", err)
	}
	if _, ep, ok, _ := Current(ctx, cliB, vol); !ok || ep != tk.epoch {
		t.Fatalf("owner after takeover: epoch %d ok %v, want %d", ep, ok, tk.epoch)
	}
}
