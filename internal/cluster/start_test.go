package cluster

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/store"
)

// threeMembers makes a cluster of n1 (init), n2 and n3 (joined: three
// voting etcd members).
func threeMembers(t *testing.T, c *clock) (n1, n2, n3 *Node) {
	t.Helper()
	ctx := ctxT(t)
	n1, n2, n3 = newNode(t, "n1", c), newNode(t, "n2", c), newNode(t, "n3", c)
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{n2, n3} {
		if err := n.Join(ctx, joinAddr(n1), mustToken(t, n1, time.Hour)); err != nil {
			t.Fatalf("join %s: %v", n.o.Name, err)
		}
	}
	return n1, n2, n3
}

// crash stops n the way a killed process looks to the others: its lease
// is not revoked and it does not leave.
func crash(n *Node) {
	n.crash = true
	n.Close()
}

// restarted is a new Node on old's state directory, ports and files (the
// process started again), with the given member bound.
func restarted(t *testing.T, old *Node, c *clock, ready time.Duration) *Node {
	t.Helper()
	n := newNode(t, old.o.Name, c)
	n.o.Dir, n.o.PeerPort, n.o.ClientPort, n.o.JoinPort = old.o.Dir, old.o.PeerPort, old.o.ClientPort, old.o.JoinPort
	n.files = old.files
	n.o.ReadyTimeout = ready
	return n
}

// stuckStart makes a three-member cluster, kills all three, and starts
// n1 again alone with the given member bound: it cannot become ready (no
// quorum). It returns once Status says Start waits for the member, with
// Start's result channel. Status must answer while Start waits: had it
// waited for Start, Start's end would come first.
func stuckStart(t *testing.T, bound time.Duration) (*Node, <-chan error) {
	t.Helper()
	ctx := ctxT(t)
	var c clock
	n1, n2, n3 := threeMembers(t, &c)
	for _, n := range []*Node{n2, n3, n1} {
		crash(n)
	}
	again := restarted(t, n1, &c, bound)
	done := make(chan error, 1)
	go func() { done <- again.Start(ctx) }()
	for {
		st, err := again.Status(ctx)
		if err == nil && strings.Contains(st.Problem, "waiting for the etcd member") {
			t.Logf("status while starting: %s", st.Problem)
			return again, done
		}
		select {
		case err := <-done:
			t.Fatalf("Start ended (%v) before Status said it waits for the member: Status waited for Start", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestStartBlockedAnswers: a member whose peers are all down cannot
// become ready. While its Start waits, InCluster, Client, Status and
// Refresh answer (they used to wait for Start's lock: the daemon's
// reconcile loop stalled silently); Start gives up after ReadyTimeout
// with an error that says what the member waited for, and has closed the
// member's ports, so a retry can bind them.
func TestStartBlockedAnswers(t *testing.T) {
	ctx := ctxT(t)
	const bound = 8 * time.Second
	again, done := stuckStart(t, bound)
	if !again.InCluster() {
		t.Error("InCluster false while starting from cluster state")
	}
	if again.Client() != nil {
		t.Error("Client set before the node registered")
	}
	if err := again.Refresh(ctx); err != nil {
		t.Errorf("Refresh while starting: %v, want nil (nothing to do)", err)
	}
	if _, ok := again.HostSecret(); ok {
		t.Error("host secret set before the node registered")
	}
	select {
	case err := <-done:
		t.Fatalf("Start ended (%v) before the calls above returned: they waited for it", err)
	default:
	}
	err := <-done
	if !errors.Is(err, store.ErrNotReady) || !strings.Contains(err.Error(), "leader none") || !strings.Contains(err.Error(), bound.String()) {
		t.Fatalf("Start of a member without peers: %v, want ErrNotReady naming the bound and no leader", err)
	}
	t.Log(err)
	st, err := again.Status(ctx)
	if err != nil || !strings.Contains(st.Problem, "start failed") {
		t.Errorf("status after the failed start: %q %v, want the failure in Problem", st.Problem, err)
	}
	for _, p := range []int{again.o.PeerPort, again.o.ClientPort} {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d still bound after the failed start: %v", p, err)
			continue
		}
		ln.Close()
	}
}

// TestStartCancelledByClose: Close ends a Start that waits for its member
// (the daemon's shutdown) instead of waiting out ReadyTimeout.
func TestStartCancelledByClose(t *testing.T) {
	again, done := stuckStart(t, time.Hour)
	again.Close()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Start ended by Close: %v, want context.Canceled", err)
	}
}

// TestMemberRestartAfterCrash: a member of three stopped hard (no leave,
// lease not revoked) and started again on its data becomes ready with
// the other two alive, and registers again: its alive key stays after
// the old lease has expired.
func TestMemberRestartAfterCrash(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, _, n3 := threeMembers(t, &c)
	old, ok, err := registry.Get(ctx, n1.cli, "n3")
	if err != nil || !ok || !old.Alive {
		t.Fatalf("n3 before the crash: %+v %v %v", old, ok, err)
	}
	lease := aliveLease(t, n1.cli, "n3")
	crash(n3)
	// Some writes while n3 is away, so it has entries to catch up on.
	for i := range 20 {
		if _, err := n1.cli.Put(ctx, "/test/k"+strconv.Itoa(i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	again := restarted(t, n3, &c, 30*time.Second)
	if err := again.Start(ctx); err != nil {
		t.Fatalf("restart of n3 with two members alive: %v", err)
	}
	// The abandoned lease expires (TTL 2 s); the new one keeps n3 alive.
	for {
		ttl, err := n1.cli.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL == -1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	ns, ok, err := registry.Get(ctx, n1.cli, "n3")
	if err != nil || !ok || !ns.Alive {
		t.Fatalf("n3 after its restart and the old lease's expiry: %+v %v %v, want alive", ns, ok, err)
	}
	if l := aliveLease(t, n1.cli, "n3"); l == lease {
		t.Errorf("n3 alive on its old lease %x", l)
	}
	st, err := again.Status(ctx)
	if err != nil || !st.Healthy || st.Problem != "" {
		t.Errorf("status on the restarted member: healthy %v problem %q err %v", st.Healthy, st.Problem, err)
	}
}

// aliveLease is the lease of name's alive key.
func aliveLease(t *testing.T, cli *clientv3.Client, name string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctxT(t), keys.Alive(name))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("alive key of %s: %v %v", name, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}
