package fence

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/keys"
)

const vol = "0a1b2c3d-0000-4000-8000-000000000013"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// live gives node an alive key on a new lease and returns the lease.
func live(t *testing.T, cli *clientv3.Client, node string) clientv3.LeaseID {
	t.Helper()
	ctx := ctxT(t)
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, keys.Alive(node), `{"version":1}`, clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	return g.ID
}

func ack(t *testing.T, cli *clientv3.Client, lease clientv3.LeaseID, node string, epoch uint64, owner string) {
	t.Helper()
	if err := Ack(ctxT(t), cli, lease, vol, node, epoch, owner); err != nil {
		t.Fatal(err)
	}
}

// pending is what Wait reports as not acknowledged on the current,
// unchanging state (nil: Wait returns nil): one pass of its loop, with no
// deadline that a loaded host could miss.
func pending(t *testing.T, cli *clientv3.Client, epoch uint64, exporters ...string) []string {
	t.Helper()
	nodes, err := waitNodes(vol, epoch, exporters)
	if err != nil {
		t.Fatalf("Wait(epoch %d, %v): %v", epoch, exporters, err)
	}
	if len(nodes) == 0 {
		return nil
	}
	p, _, err := pendingAt(ctxT(t), cli, vol, epoch, nodes)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range p {
		out = append(out, q.Node)
	}
	return out
}

func wantPending(t *testing.T, cli *clientv3.Client, epoch uint64, exporters []string, want ...string) {
	t.Helper()
	if got := pending(t, cli, epoch, exporters...); !reflect.DeepEqual(got, want) {
		t.Fatalf("Wait(epoch %d, %v) pending %v; want %v", epoch, exporters, got, want)
	}
}

func TestWaitCountsLiveAcksAtOrAboveEpoch(t *testing.T) {
	cli := etcdtest.Start(t)
	la, lb := live(t, cli, "a"), live(t, cli, "b")
	ex := []string{"a", "b", "dead", "b"} // "dead" has no alive key; duplicates are one node
	const E = 100
	wantPending(t, cli, E, ex, "a", "b")
	ack(t, cli, la, "a", E, "n")
	ack(t, cli, lb, "b", E-1, "o") // an old owner's epoch does not count
	wantPending(t, cli, E, ex, "b")
	ack(t, cli, lb, "b", 0, "") // exported to nobody is not the fence for E either
	wantPending(t, cli, E, ex, "b")
	ack(t, cli, lb, "b", E+5, "m") // a newer epoch shuts out the old owners too
	wantPending(t, cli, E, ex)
	if err := Wait(ctxT(t), cli, vol, E, nil); err != nil {
		t.Errorf("Wait without exporters: %v", err)
	}
	// Another volume's acks do not count.
	acks, err := Acks(ctxT(t), cli, vol)
	if err != nil || len(acks) != 2 || acks["a"].Epoch != E || acks["a"].Owner != "n" || acks["b"].Epoch != E+5 {
		t.Fatalf("Acks = %+v, %v", acks, err)
	}
	// Acks of another volume do not count for this one.
	other := "0a1b2c3d-0000-4000-8000-000000000099"
	if err := Ack(ctxT(t), cli, la, other, "b", E, "n"); err != nil {
		t.Fatal(err)
	}
	if err := Ack(ctxT(t), cli, lb, vol, "b", E-1, "o"); err != nil {
		t.Fatal(err)
	}
	wantPending(t, cli, E, ex, "b")
}

// A Wait in progress returns once the last live exporter acknowledges, and
// not on an old acknowledgement.
func TestWaitWakesOnAck(t *testing.T) {
	cli := etcdtest.Start(t)
	la, lb := live(t, cli, "a"), live(t, cli, "b")
	const E = 50
	ack(t, cli, la, "a", E, "n")
	done := make(chan error, 1)
	go func() { done <- Wait(ctxT(t), cli, vol, E, []string{"a", "b"}) }()
	ack(t, cli, lb, "b", E-10, "o")
	wantPending(t, cli, E, []string{"a", "b"}, "b")
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before b acknowledged epoch %d", err, E)
	default:
	}
	ack(t, cli, lb, "b", E, "n")
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// A node that dies while Wait runs (its lease, with its alive key and any
// ack, is gone) stops being waited for; one that comes back without an ack
// is waited for again.
func TestWaitNodeDiesAndReturns(t *testing.T) {
	cli := etcdtest.Start(t)
	la, lb := live(t, cli, "a"), live(t, cli, "b")
	const E = 7
	ack(t, cli, la, "a", E, "n")
	ack(t, cli, lb, "b", E-1, "o")
	done := make(chan error, 1)
	go func() { done <- Wait(ctxT(t), cli, vol, E, []string{"a", "b"}) }()
	wantPending(t, cli, E, []string{"a", "b"}, "b")
	if _, err := cli.Revoke(ctxT(t), lb); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait after b died: %v", err)
	}
	if acks, err := Acks(ctxT(t), cli, vol); err != nil || len(acks) != 1 {
		t.Fatalf("Acks after b died = %+v, %v; want a's only (b's went with its lease)", acks, err)
	}
	live(t, cli, "b")
	wantPending(t, cli, E, []string{"a", "b"}, "b")
}

func TestWaitBoundByContext(t *testing.T) {
	cli := etcdtest.Start(t)
	la := live(t, cli, "a")
	live(t, cli, "b")
	ack(t, cli, la, "a", 3, "n")
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	err := Wait(ctx, cli, vol, 3, []string{"a", "b"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
	// The deadline is long enough for the first read even on a loaded
	// host: NotAckedError names what that read found pending.
	ctx, cancel = context.WithTimeout(ctxT(t), 3*time.Second)
	defer cancel()
	err = Wait(ctx, cli, vol, 3, []string{"a", "b"})
	var na *NotAckedError
	if !errors.As(err, &na) || !errors.Is(err, context.DeadlineExceeded) || len(na.Pending) != 1 || na.Pending[0] != (Pending{"b", "no acknowledgement"}) {
		t.Fatalf("Wait = %v; want b pending with no acknowledgement", err)
	}
	if !strings.Contains(err.Error(), "b (no acknowledgement)") || !strings.Contains(err.Error(), "epoch 3") {
		t.Errorf("error %q does not name b and the epoch", err)
	}
}

func TestAckAndWaitRefuseBadInput(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	la := live(t, cli, "a")
	for _, c := range []struct {
		name                string
		lease               clientv3.LeaseID
		volume, node, owner string
		epoch               uint64
	}{
		{"no lease", 0, vol, "a", "n", 1},
		{"slash in node", la, vol, "a/b", "n", 1},
		{"empty volume", la, "", "a", "n", 1},
		{"owner at epoch 0", la, vol, "a", "n", 0},
		{"no owner at an epoch", la, vol, "a", "", 1},
	} {
		if err := Ack(ctx, cli, c.lease, c.volume, c.node, c.epoch, c.owner); !errors.Is(err, ErrInvalid) {
			t.Errorf("Ack %s: %v; want ErrInvalid", c.name, err)
		}
	}
	if err := Wait(ctx, cli, vol, 0, []string{"a"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Wait for epoch 0: %v", err)
	}
	if err := Wait(ctx, cli, vol, 1, []string{"x/y"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Wait for node x/y: %v", err)
	}
	// An unreadable ack is pending, with the reason.
	if _, err := cli.Put(ctx, keys.Fence(vol, "a"), `{"version":9,"epoch":5}`, clientv3.WithLease(la)); err != nil {
		t.Fatal(err)
	}
	if p, _, err := pendingAt(ctx, cli, vol, 1, []string{"a"}); err != nil || len(p) != 1 || !strings.Contains(p[0].Reason, "schema version 9") {
		t.Errorf("pending with a newer-schema ack: %+v %v", p, err)
	}
	if _, err := Acks(ctx, cli, vol); err == nil || !strings.Contains(err.Error(), keys.Fence(vol, "a")) {
		t.Errorf("Acks with an unreadable record: %v", err)
	}
}
