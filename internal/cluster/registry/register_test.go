package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/registry"
)

// failingReads is a KV whose reads of keys with a prefix in fail return
// an error (a transient etcd error: deadline, no leader), as a member
// under election answers.
type failingReads struct {
	clientv3.KV
	fail []string
}

var errTransient = errors.New("context deadline exceeded (injected)")

func (f failingReads) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	for _, p := range f.fail {
		if strings.HasPrefix(key, p) {
			return nil, errTransient
		}
	}
	return f.KV.Get(ctx, key, opts...)
}

func stored(t *testing.T, kv clientv3.KV, name string) registry.Node {
	t.Helper()
	s, ok, err := registry.Get(context.Background(), kv, name)
	if err != nil || !ok {
		t.Fatalf("record of %s: ok %v, %v", name, ok, err)
	}
	return s.Node
}

// TestRegisterKeepsBlock: a node's controller-ID block and join time are
// assigned at its first registration and survive re-registrations,
// including one whose read of the stored record fails (it must write
// nothing) and ones with another inventory or clock.
func TestRegisterKeepsBlock(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 4, 4, 23, 35, 0, time.UTC)
	for i, name := range []string{"s1", "s2", "s3"} {
		got, err := registry.Register(ctx, cli, registry.Node{Name: name, HostNQN: "nqn." + name}, t0.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if got.CntlIDBlock != i+1 {
			t.Fatalf("%s: block %d, want %d", name, got.CntlIDBlock, i+1)
		}
	}
	before := stored(t, cli, "s2")

	// The read of the stored record fails: nothing is written.
	later := t0.Add(5 * time.Minute)
	_, err := registry.Register(ctx, failingReads{cli, []string{keys.Node("s2")}}, registry.Node{Name: "s2", HostNQN: "nqn.s2", Drives: []registry.Drive{{ID: "d1"}}}, later)
	if !errors.Is(err, errTransient) {
		t.Fatalf("register with a failed read: %v, want the read's error", err)
	}
	if after := stored(t, cli, "s2"); after.Joined != before.Joined || after.CntlIDBlock != before.CntlIDBlock || len(after.Drives) != 0 {
		t.Fatalf("a failed read changed the record: %+v, was %+v", after, before)
	}
	// The read of the block claims fails for a record that has its block:
	// the claims are not needed and the write goes through unchanged.
	if _, err := registry.Register(ctx, failingReads{cli, []string{keys.CntlIDBlocksPrefix}}, registry.Node{Name: "s2", HostNQN: "nqn.s2", Drives: []registry.Drive{{ID: "d1"}}}, later); err != nil {
		t.Fatal(err)
	}
	after := stored(t, cli, "s2")
	if after.Joined != before.Joined || after.CntlIDBlock != 2 || len(after.Drives) != 1 || !after.Updated.Equal(later) {
		t.Fatalf("re-registration: %+v, want joined %v, block 2, one drive, updated %v", after, before.Joined, later)
	}

	// An unchanged record is not written again.
	rev := modRevision(t, cli, keys.Node("s2"))
	if _, err := registry.Register(ctx, cli, registry.Node{Name: "s2", HostNQN: "nqn.s2", Drives: []registry.Drive{{ID: "d1"}}}, later.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r := modRevision(t, cli, keys.Node("s2")); r != rev {
		t.Fatalf("unchanged record written again: revision %d -> %d", rev, r)
	}
}

// TestRegisterBlocks: concurrent first registrations get distinct blocks;
// a removed node's block is free for the next node; a record written
// without a block (an older fabraid) gets one at its next registration.
func TestRegisterBlocks(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	const n = 12
	blocks := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got, err := registry.Register(ctx, cli, registry.Node{Name: fmt.Sprintf("n%02d", i)}, now)
			if err != nil {
				t.Error(err)
			}
			blocks[i] = got.CntlIDBlock
		})
	}
	wg.Wait()
	seen := map[int]string{}
	for i, b := range blocks {
		if b < 1 || seen[b] != "" {
			t.Fatalf("n%02d: block %d (blocks %v)", i, b, blocks)
		}
		seen[b] = fmt.Sprintf("n%02d", i)
	}

	lowestFree := func() int {
		b := 1
		for seen[b] != "" {
			b++
		}
		return b
	}
	// Lost races leave holes; later nodes take the lowest free block.
	delete(seen, blocks[3])
	if err := registry.Delete(ctx, cli, "n03"); err != nil {
		t.Fatal(err)
	}
	want := lowestFree()
	if got, err := registry.Register(ctx, cli, registry.Node{Name: "late"}, now); err != nil || got.CntlIDBlock != want {
		t.Fatalf("after n03 left: block %d, %v; want the lowest free %d (n03 had %d)", got.CntlIDBlock, err, want, blocks[3])
	}
	seen[want] = "late"
	if err := registry.Put(ctx, cli, registry.Node{Name: "old", Joined: now}); err != nil {
		t.Fatal(err)
	}
	want = lowestFree()
	if got, err := registry.Register(ctx, cli, registry.Node{Name: "old"}, now.Add(time.Hour)); err != nil || got.CntlIDBlock != want || !got.Joined.Equal(now) {
		t.Fatalf("record without a block: block %d joined %v, %v; want %d, %v", got.CntlIDBlock, got.Joined, err, want, now)
	}
}

func modRevision(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	return resp.Kvs[0].ModRevision
}

// TestSetDrained: a registered node is drained and undrained, List says
// so (with the first drain's time kept by a second drain), an unknown node
// cannot be drained, and Delete removes the drain with the node.
func TestSetDrained(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	for _, name := range []string{"s1", "s2"} {
		if _, err := registry.Register(ctx, cli, registry.Node{Name: name}, t0); err != nil {
			t.Fatal(err)
		}
	}
	drained := func() map[string]time.Time {
		t.Helper()
		ns, err := registry.List(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Time{}
		for _, n := range ns {
			if n.Drained {
				out[n.Name] = n.DrainedSince
			}
		}
		return out
	}
	if err := registry.SetDrained(ctx, cli, "s1", true, t0); err != nil {
		t.Fatal(err)
	}
	if err := registry.SetDrained(ctx, cli, "s1", true, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := drained(); len(got) != 1 || !got["s1"].Equal(t0) {
		t.Fatalf("drained %v, want s1 since %v", got, t0)
	}
	if err := registry.SetDrained(ctx, cli, "nope", true, t0); !errors.Is(err, registry.ErrUnknownNode) {
		t.Fatalf("drain of an unknown node: %v, want %v", err, registry.ErrUnknownNode)
	}
	if n, _ := cli.Get(ctx, keys.Drain("nope")); n.Count != 0 {
		t.Fatal("an unknown node's drain key was written")
	}
	if err := registry.SetDrained(ctx, cli, "s1", false, t0); err != nil {
		t.Fatal(err)
	}
	if got := drained(); len(got) != 0 {
		t.Fatalf("drained after undrain: %v", got)
	}
	if err := registry.SetDrained(ctx, cli, "s2", true, t0); err != nil {
		t.Fatal(err)
	}
	if err := registry.Delete(ctx, cli, "s2"); err != nil {
		t.Fatal(err)
	}
	if n, _ := cli.Get(ctx, keys.Drain("s2")); n.Count != 0 {
		t.Fatal("drain key left after Delete")
	}
}
