package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/fence"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/store"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// TestClientWritesOnlyItsOwn (issue 28, least privilege in etcd): real
// embedded etcd, one member n1 and two client-only nodes n2 and n3. n2's
// node certificate is refused (PermissionDenied) for the cluster record,
// join tokens, n3's and n1's registry keys (record, host key, alive key,
// paths), keys outside fabraid's prefix, etcd membership changes and
// etcd's user and role API; everything its own work needs succeeds:
// its own record and host key, a volume over other nodes' drives with
// their drive claims, owner keys on its own lease, fence acks, status
// and paths on a lease it then revokes, requests, drains of any node and
// its own leave (which deletes its drain mark).
// The member still removes a dead node.
func TestClientWritesOnlyItsOwn(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, n2, n3 := newNode(t, "n1", &c), newNode(t, "n2", &c), newNode(t, "n3", &c)
	n1.o.Members = 1
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{n2, n3} {
		if err := n.Join(ctx, joinAddr(n1), mustToken(t, n1, time.Hour)); err != nil {
			t.Fatalf("join %s: %v", n.o.Name, err)
		}
		if n.st.Member {
			t.Fatalf("%s became a member beyond the target of 1", n.o.Name)
		}
	}
	cli := n2.Client()
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("client n2: %s: %v, want permission denied", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("client n2: %s: %v, want allowed", what, err)
		}
	}
	put := func(k string) error { _, err := cli.Put(ctx, k, `{"version":1}`); return err }
	del := func(k string) error { _, err := cli.Delete(ctx, k); return err }

	// Forbidden.
	denied("put the cluster record", put(keys.Cluster))
	denied("delete the cluster record", del(keys.Cluster))
	denied("put a token record", put(keys.Token("000000000000")))
	denied("delete the tokens", func() error { _, err := cli.Delete(ctx, keys.TokensPrefix, clientv3.WithPrefix()); return err }())
	for _, other := range []string{"n1", "n3"} {
		denied("put "+other+"'s registry record", put(keys.Node(other)))
		denied("delete "+other+"'s registry record", del(keys.Node(other)))
		denied("put "+other+"'s host key", put(keys.HostKey(other)))
		denied("delete "+other+"'s alive key", del(keys.Alive(other)))
		denied("put "+other+"'s paths", put(keys.Paths(other)))
		denied("registry.Delete "+other, registry.Delete(ctx, cli, other))
	}
	denied("put n2x (a prefix of n2's keys is not n2's)", put(keys.Node("n2x")))
	denied("put outside fabraid's prefix", put("/other"))
	denied("delete all nodes", func() error { _, err := cli.Delete(ctx, keys.NodesPrefix, clientv3.WithPrefix()); return err }())
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 1 {
		t.Fatalf("members %v, want n1 alone", ml.Members)
	}
	_, err = cli.MemberRemove(ctx, ml.Members[0].ID)
	denied("remove member n1", err)
	_, err = cli.MemberAddAsLearner(ctx, []string{"https://127.0.0.1:1"})
	denied("add a learner", err)
	_, err = cli.AuthDisable(ctx)
	denied("disable auth", err)
	_, err = cli.UserGrantRole(ctx, "n2", "root")
	denied("grant itself root", err)
	if len(ml.Members) == 1 {
		if mm, err := n1.Client().MemberList(ctx); err != nil || len(mm.Members) != 1 {
			t.Errorf("member list after the refusals: %v %v", mm, err)
		}
	}

	// Allowed: its own work.
	allowed("refresh its record and host key", n2.Refresh(ctx))
	resp, err := cli.Get(ctx, keys.Prefix, clientv3.WithPrefix())
	allowed("read all of fabraid's keys", err)
	if err == nil && len(resp.Kvs) == 0 {
		t.Error("read nothing")
	}
	v := model.Volume{UUID: "00000000-0000-4000-8000-000000000001", Name: "v", K: 2, M: 1, Groups: 1, Owner: "n2", State: model.VolumeCreating, MemberSize: 1 << 30}
	for i, n := range []string{"n1", "n2", "n3"} {
		v.Members = append(v.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d1"})
	}
	allowed("create a volume over other nodes' drives", volumes.Create(ctx, cli, v))
	s, err := owner.NewSession(ctx, cli, owner.Options{TTL: 5 * time.Second})
	allowed("owner lease", err)
	if err == nil {
		_, err = owner.Acquire(ctx, s, v.UUID, "n2")
		allowed("acquire the owner key", err)
		allowed("close the owner lease", s.Close(ctx))
	}
	lease, err := cli.Grant(ctx, 15)
	allowed("grant a status lease", err)
	allowed("fence ack", fence.Ack(ctx, cli, lease.ID, v.UUID, "n2", 7, "n3"))
	allowed("volume status", volumes.PutStatus(ctx, cli, lease.ID, model.VolumeStatus{UUID: v.UUID, Name: "v", Owner: "n2", State: "optimal"}))
	allowed("own paths", volumes.PutPaths(ctx, cli, lease.ID, model.NodePaths{Node: "n2"}))
	_, err = cli.KeepAliveOnce(ctx, lease.ID)
	allowed("keep the status lease alive", err)
	_, err = cli.Revoke(ctx, lease.ID)
	allowed("revoke the status lease", err)
	_, err = volumes.Modify(ctx, cli, v.UUID, func(v *model.Volume) error {
		v.State = model.VolumeReady
		for i := range v.Members {
			v.Members[i].UUID = fmt.Sprintf("00000000-0000-4000-8000-0000000001%02d", i)
		}
		return nil
	})
	allowed("update the volume record", err)
	allowed("submit a request", volumes.Submit(ctx, cli, model.Request{Volume: v.UUID, ID: volumes.NewRequestID(), Op: "scrub", RequestedBy: "n2", Created: c.now()}, nil))
	allowed("delete the volume", volumes.Delete(ctx, cli, v.UUID))
	allowed("drain n1 (node drain is served by any node)", registry.SetDrained(ctx, cli, "n1", true, c.now()))
	allowed("undrain n1", registry.SetDrained(ctx, cli, "n1", false, c.now()))
	_, cerr := registry.ClearDown(ctx, cli, "n1")
	allowed("clear n1's down record (the re-protection clock)", cerr)
	allowed("drain itself", registry.SetDrained(ctx, cli, "n2", true, c.now()))

	// n2 cannot remove n3; n1 (a member) can once n3 is dead; n2 leaves.
	n3.Close()
	waitDead(t, n1.Client(), "n3")
	if err := n2.Remove(ctx, "n3"); err == nil || !strings.Contains(err.Error(), "run fabraid cluster remove on a member") {
		t.Errorf("client n2 removes n3: %v, want a refusal that says to run it on a member", err)
	}
	if err := n1.Remove(ctx, "n3"); err != nil {
		t.Errorf("member n1 removes dead n3: %v", err)
	}
	// n3's certificate can do nothing in etcd any more: its user is gone.
	if u, err := n1.Client().UserList(ctx); err != nil || slices.Contains(u.Users, "n3") {
		t.Errorf("etcd users after n3's removal: %v (%v), want no n3", u, err)
	}
	removedCertRefused(ctx, t, n1, n3)
	allowed("leave", n2.Leave(ctx, false))
	if _, ok, err := registry.Get(ctx, n1.Client(), "n2"); err != nil || ok {
		t.Errorf("n2 still registered after its leave: %v %v", ok, err)
	}
}

// removedCertRefused checks that a client with removed's certificate
// (still valid: nothing revokes it) can neither read nor write etcd
// through member's endpoints.
func removedCertRefused(ctx context.Context, t *testing.T, member, removed *Node) {
	t.Helper()
	tc, err := removed.files.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := store.Connect(member.Client().Endpoints(), tc, removed.o.Log)
	if err != nil {
		t.Fatalf("connect with %s's certificate: %v", removed.o.Name, err)
	}
	defer cli.Close()
	if _, err := cli.Get(ctx, keys.NodesPrefix, clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("removed %s reads the node records: %v, want permission denied", removed.o.Name, err)
	}
	if _, err := cli.Put(ctx, keys.NodesPrefix+removed.o.Name, "{}"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("removed %s writes its own record: %v, want permission denied", removed.o.Name, err)
	}
}

// TestEnableRBACLater: a cluster whose etcd has no authentication and no
// users (made before RBAC) keeps working; EnableRBAC on its member gives
// the member root and the client its roles: afterwards the client's
// write of the cluster record is refused, its own record is not, and the
// member still makes tokens and admits a new client.
func TestEnableRBACLater(t *testing.T) {
	ctx := ctxT(t)
	var c clock
	n1, n2 := newNode(t, "n1", &c), newNode(t, "n2", &c)
	n1.o.Members = 1
	if err := n1.Init(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if err := n2.Join(ctx, joinAddr(n1), mustToken(t, n1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Back to what a cluster made before RBAC has: no authentication,
	// no users, no roles.
	root := n1.Client()
	if _, err := root.AuthDisable(ctx); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"n1", "n2", "root"} {
		if _, err := root.UserDelete(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	rl, err := root.RoleList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rl.Roles {
		if _, err := root.RoleDelete(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	cli := n2.Client()
	if _, err := cli.Put(ctx, keys.Cluster, `{"version":1}`); err != nil {
		t.Fatalf("without RBAC: %v", err)
	}
	if err := n2.EnableRBAC(ctx); !errors.Is(err, ErrNotMember) {
		t.Errorf("EnableRBAC on a client: %v, want ErrNotMember", err)
	}
	if err := n1.EnableRBAC(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n1.EnableRBAC(ctx); err != nil {
		t.Fatalf("again: %v", err)
	}
	if _, err := cli.Put(ctx, keys.Cluster, `{"version":1}`); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("client writes the cluster record after EnableRBAC: %v", err)
	}
	if err := n2.Refresh(ctx); err != nil {
		t.Errorf("client refresh after EnableRBAC: %v", err)
	}
	n3 := newNode(t, "n3", &c)
	if err := n3.Join(ctx, joinAddr(n1), mustToken(t, n1, time.Hour)); err != nil {
		t.Fatalf("join after EnableRBAC: %v", err)
	}
	if _, err := n3.Client().Put(ctx, keys.Node("n2"), `{"version":1}`); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("new client n3 writes n2's record: %v", err)
	}
}
