package owner

import (
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLapsesNote: what a node learns from two snapshots of the owner keys
// and published sessions, with no etcd request but for the keys of
// holders that published no session.
func TestLapsesNote(t *testing.T) {
	key := func(node string, lease clientv3.LeaseID, epoch Epoch) Key {
		return Key{Record: Record{Node: node, Lease: LeaseString(lease)}, Epoch: epoch, LeaseID: lease}
	}
	snap := func(ks map[string]Key, ss map[string]clientv3.LeaseID) Snapshot {
		return Snapshot{Keys: ks, Sessions: ss}
	}
	before := snap(map[string]Key{"v1": key("a", 1, 10), "v2": key("old", 9, 11), "v3": key("self", 5, 12)},
		map[string]clientv3.LeaseID{"a": 1, "b": 2, "self": 5})
	for _, tc := range []struct {
		name    string
		after   Snapshot
		ended   []string
		unknown []Key
	}{
		{"nothing changed", before, nil, nil},
		{"a resigned v1 (its session stays)",
			snap(map[string]Key{"v2": key("old", 9, 11)}, map[string]clientv3.LeaseID{"a": 1, "b": 2, "self": 5}), nil, nil},
		{"a's lease ended: its key and session gone at once",
			snap(map[string]Key{"v2": key("old", 9, 11)}, map[string]clientv3.LeaseID{"b": 2, "self": 5}), []string{"a"}, nil},
		{"b, holding no key, lapsed; a replaced its session (the old one fenced)",
			snap(before.Keys, map[string]clientv3.LeaseID{"a": 3, "self": 5}), []string{"a", "b"}, nil},
		{"a key of a node without a published session vanished: etcd is asked",
			snap(map[string]Key{"v1": key("a", 1, 10)}, before.Sessions), nil, []Key{key("old", 9, 11)}},
		{"taken over between the snapshots (a new epoch): etcd is asked of the old key",
			snap(map[string]Key{"v1": key("a", 1, 10), "v2": key("b", 2, 20)}, before.Sessions), nil, []Key{key("old", 9, 11)}},
		{"this node's own session and keys are not followed",
			snap(map[string]Key{"v1": key("a", 1, 10), "v2": key("old", 9, 11)}, map[string]clientv3.LeaseID{"a": 1, "b": 2}), nil, nil},
	} {
		l := NewLapses("self")
		l.Note(before)
		ended, unknown := l.Note(tc.after)
		if !reflect.DeepEqual(ended, tc.ended) || !reflect.DeepEqual(unknown, tc.unknown) {
			t.Errorf("%s: ended %v, unknown %+v; want %v, %+v", tc.name, ended, unknown, tc.ended, tc.unknown)
		}
	}
}

// TestPublishRead: a published session is in Read's snapshot with the
// owner keys at the same revision; when its lease is revoked, the session
// and its keys leave together, so Lapses sees the session end; a resign
// under a live session is no lapse. Holders are the nodes holding a key
// on the session they published.
func TestPublishRead(t *testing.T) {
	ctx := ctxT(t)
	cli := client(t, startEtcd(t))
	const v1 = "0d7f3a52-6b1e-4c1a-9a57-3c4f8c2b9e01"
	sa, err := NewSession(ctx, cli, Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx, cli, sa, "a"); err != nil {
		t.Fatal(err)
	}
	e1, err := Acquire(ctx, sa, v1, "a")
	if err != nil {
		t.Fatal(err)
	}
	l := NewLapses("b")
	snap, err := Read(ctx, cli)
	if err != nil || snap.Sessions["a"] != sa.Lease() || snap.Keys[v1].Epoch != e1 || !reflect.DeepEqual(snap.Holders("b"), []string{"a"}) {
		t.Fatalf("Read = %+v, %v; want a's session and key", snap, err)
	}
	l.Note(snap)
	if err := Resign(ctx, cli, v1, e1); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(ctx, sa, v1, "a"); err != nil {
		t.Fatal(err)
	}
	if snap, err = Read(ctx, cli); err != nil {
		t.Fatal(err)
	}
	if ended, unknown := l.Note(snap); ended != nil || unknown != nil {
		t.Fatalf("after a resign: ended %v, unknown %v", ended, unknown)
	}
	if err := sa.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if snap, err = Read(ctx, cli); err != nil {
		t.Fatal(err)
	}
	if len(snap.Keys) != 0 || len(snap.Sessions) != 0 {
		t.Fatalf("after a's session closed: %+v", snap)
	}
	if ended, unknown := l.Note(snap); !reflect.DeepEqual(ended, []string{"a"}) || unknown != nil {
		t.Fatalf("after a's session closed: ended %v, unknown %v; want [a]", ended, unknown)
	}
}

// TestLapsesReplacedSession: a's session fenced and a published a new
// one while its old key still lasts at the server; when that key lapses,
// a is ended again with no lookup (its old session was seen to end), and
// the ended session is forgotten once none of its keys is left.
func TestLapsesReplacedSession(t *testing.T) {
	old := Key{Record: Record{Node: "a", Lease: LeaseString(1)}, Epoch: 10, LeaseID: 1}
	l := NewLapses("self")
	l.Note(Snapshot{Keys: map[string]Key{"v1": old}, Sessions: map[string]clientv3.LeaseID{"a": 1}})
	ended, unknown := l.Note(Snapshot{Keys: map[string]Key{"v1": old}, Sessions: map[string]clientv3.LeaseID{"a": 2}})
	if !reflect.DeepEqual(ended, []string{"a"}) || unknown != nil {
		t.Fatalf("a's session replaced: ended %v, unknown %v; want [a]", ended, unknown)
	}
	after := Snapshot{Keys: map[string]Key{}, Sessions: map[string]clientv3.LeaseID{"a": 2}}
	if got := (Snapshot{Keys: map[string]Key{"v1": old}, Sessions: after.Sessions}).Holders("self"); got != nil {
		t.Fatalf("holders with a's key on its replaced session: %v, want none", got)
	}
	ended, unknown = l.Note(after)
	if !reflect.DeepEqual(ended, []string{"a"}) || unknown != nil {
		t.Fatalf("a's old key lapsed: ended %v, unknown %+v; want [a] and no lookup", ended, unknown)
	}
	if len(l.gone) != 0 {
		t.Fatalf("ended sessions kept with no key on them: %v", l.gone)
	}
}
