package volumes

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
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// These tests run against a real etcd member embedded in the test
// process (package etcdtest).

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func uuidN(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", n) }

func vol(uuid, name string) model.Volume {
	v := model.Volume{UUID: uuid, Name: name, K: 2, M: 1, Groups: 1, Owner: "a", State: model.VolumeCreating, MemberSize: 1 << 30}
	for i, n := range []string{"a", "b", "c"} {
		v.Members = append(v.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d1"})
	}
	return v
}

// barrierKV holds every transaction's Commit until n of them have
// arrived, so racing creates really are in flight together.
type barrierKV struct {
	clientv3.KV
	wg *sync.WaitGroup
}

func (b barrierKV) Txn(ctx context.Context) clientv3.Txn { return barrierTxn{b.KV.Txn(ctx), b.wg} }

type barrierTxn struct {
	clientv3.Txn
	wg *sync.WaitGroup
}

func (t barrierTxn) If(c ...clientv3.Cmp) clientv3.Txn  { return barrierTxn{t.Txn.If(c...), t.wg} }
func (t barrierTxn) Then(o ...clientv3.Op) clientv3.Txn { return barrierTxn{t.Txn.Then(o...), t.wg} }
func (t barrierTxn) Else(o ...clientv3.Op) clientv3.Txn { return barrierTxn{t.Txn.Else(o...), t.wg} }
func (t barrierTxn) Commit() (*clientv3.TxnResponse, error) {
	t.wg.Done()
	t.wg.Wait()
	return t.Txn.Commit()
}

func TestCreateRaceOneWins(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	wg.Add(2)
	kv := barrierKV{cli, &wg}
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i := range 2 {
		done.Add(1)
		go func() {
			defer done.Done()
			errs[i] = Create(ctx, kv, vol(uuidN(i+1), "v"))
		}()
	}
	done.Wait()
	winner, loser := 0, 1
	if errs[0] != nil {
		winner, loser = 1, 0
	}
	if errs[winner] != nil || !errors.Is(errs[loser], ErrExists) {
		t.Fatalf("racing creates: %v, %v; want exactly one ErrExists", errs[0], errs[1])
	}
	if want := fmt.Sprintf("volume %q is %s", "v", uuidN(winner+1)); !strings.Contains(errs[loser].Error(), want) {
		t.Errorf("loser's error %q does not say %q", errs[loser], want)
	}
	vs, err := List(ctx, cli)
	if err != nil || len(vs) != 1 || vs[0].UUID != uuidN(winner+1) {
		t.Fatalf("List = %+v, %v; want only the winner", vs, err)
	}
	v, _, ok, err := GetByName(ctx, cli, "v")
	if err != nil || !ok || v.UUID != uuidN(winner+1) || v.Version != model.VolumeVersion {
		t.Errorf("GetByName = %+v, %v, %v", v, ok, err)
	}
	// The UUID is unique too.
	if err := Create(ctx, cli, vol(uuidN(winner+1), "w")); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "UUID") {
		t.Errorf("create with a taken UUID: %v", err)
	}
	if _, _, ok, _ := GetByName(ctx, cli, "w"); ok {
		t.Error("a refused create left its name claim")
	}
}

func TestUpdateCASAndDelete(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	u := uuidN(7)
	if err := Create(ctx, cli, vol(u, "v")); err != nil {
		t.Fatal(err)
	}
	_, rev, ok, err := Get(ctx, cli, u)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	// Two updaters read the same revision: the first wins, the second
	// gets ErrConflict and its change is not written.
	if err := Update(ctx, cli, u, rev, func(v *model.Volume) error { v.State = model.VolumeReady; return nil }); err != nil {
		t.Fatal(err)
	}
	err = Update(ctx, cli, u, rev, func(v *model.Volume) error { v.Owner = "b"; return nil })
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	v, rev2, _, _ := Get(ctx, cli, u)
	if v.State != model.VolumeReady || v.Owner != "a" || rev2 == rev {
		t.Errorf("after the CAS: %+v rev %d (was %d)", v, rev2, rev)
	}
	// The window between Update's read and its write: a write in it
	// makes the transaction fail, not overwrite.
	err = Update(ctx, cli, u, rev2, func(v *model.Volume) error {
		if _, err := Modify(ctx, cli, u, func(w *model.Volume) error { w.Owner = "c"; return nil }); err != nil {
			t.Error(err)
		}
		v.Owner = "b"
		return nil
	})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("update racing a write: %v, want ErrConflict", err)
	}
	if v, _, _, _ := Get(ctx, cli, u); v.Owner != "c" {
		t.Errorf("owner %q, want the concurrent write's c", v.Owner)
	}
	_, rev3, _, _ := Get(ctx, cli, u)
	if err := Update(ctx, cli, u, rev3, func(v *model.Volume) error { v.Name = "x"; return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("rename: %v, want ErrInvalid", err)
	}
	if err := Update(ctx, cli, uuidN(99), 1, func(*model.Volume) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of no volume: %v", err)
	}

	if err := PutStatus(ctx, cli, 0, model.VolumeStatus{UUID: u, Name: "v", State: "optimal"}); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, cli, u); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, cli, u); err != nil {
		t.Errorf("second delete: %v", err)
	}
	resp, _ := cli.Get(ctx, keys.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if resp.Count != 0 {
		t.Errorf("%d keys left after delete", resp.Count)
	}
	if err := Create(ctx, cli, vol(uuidN(8), "v")); err != nil {
		t.Errorf("name not free after delete: %v", err)
	}
}

func TestStatusGoesWithLease(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	l, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	s := model.VolumeStatus{UUID: uuidN(1), Name: "v", Owner: "a", State: "degraded", ResyncBytes: 4096,
		Members: []model.VolumeMemberStatus{{Slot: 0, Node: "a", Role: "active"}, {Slot: 1, Node: "b", Role: "failed", Failure: "unreachable"}}}
	if err := PutStatus(ctx, cli, l.ID, s); err != nil {
		t.Fatal(err)
	}
	m, err := ListStatus(ctx, cli)
	if got := m[uuidN(1)]; err != nil || got.State != "degraded" || got.ResyncBytes != 4096 || len(got.Degraded()) != 1 {
		t.Fatalf("ListStatus = %+v, %v", m, err)
	}
	if _, err := cli.Revoke(ctx, l.ID); err != nil { // what the owner's death does, at the lease's expiry
		t.Fatal(err)
	}
	if m, err := ListStatus(ctx, cli); err != nil || len(m) != 0 {
		t.Errorf("after the lease: %+v, %v; want no status", m, err)
	}
}

func TestNewerVersionsRefused(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	u := uuidN(3)
	sec, _ := nvmf.GenerateSecret(32)
	for k, v := range map[string]string{
		keys.Volume(u):       `{"version":2,"uuid":"` + u + `","name":"v"}`,
		keys.VolumeName("v"): `{"version":2,"uuid":"` + u + `"}`,
		keys.VolumeStatus(u): `{"version":2,"uuid":"` + u + `"}`,
		keys.HostKey("a"):    `{"version":2,"secret":"` + sec.Reveal() + `"}`,
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	want := "schema version 2, this fabraid reads 1..1"
	_, _, _, err1 := Get(ctx, cli, u)
	_, _, _, err2 := GetByName(ctx, cli, "v")
	_, err3 := List(ctx, cli)
	_, err4 := ListStatus(ctx, cli)
	_, err5 := HostKeys(ctx, cli)
	for i, err := range []error{err1, err2, err3, err4, err5} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("read %d: %v, want %q", i+1, err, want)
		}
	}
	if err := Create(ctx, cli, vol(uuidN(4), "v")); !errors.Is(err, ErrExists) {
		t.Errorf("create over a newer name claim: %v, want ErrExists", err)
	}
}

func TestHostKeys(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	s1, _ := nvmf.GenerateSecret(32)
	s2, _ := nvmf.GenerateSecret(32)
	secret := s1.Reveal()
	local := func() (string, error) { return secret, nil }
	got, err := EnsureHostKey(ctx, cli, "a", local)
	if err != nil || got != secret {
		t.Fatalf("EnsureHostKey = %v", err) // never print the secret
	}
	r1, _ := cli.Get(ctx, keys.HostKey("a"))
	if _, err := EnsureHostKey(ctx, cli, "a", local); err != nil {
		t.Fatal(err)
	}
	r2, _ := cli.Get(ctx, keys.HostKey("a"))
	if r2.Kvs[0].ModRevision != r1.Kvs[0].ModRevision {
		t.Error("an unchanged host key was written again")
	}
	secret = s2.Reveal() // the node's state was recreated: its file wins
	if _, err := EnsureHostKey(ctx, cli, "a", local); err != nil {
		t.Fatal(err)
	}
	m, err := HostKeys(ctx, cli)
	if err != nil || len(m) != 1 || m["a"].Reveal() != s2.Reveal() {
		t.Errorf("HostKeys: %d keys, a matches: %v, %v", len(m), m["a"].Reveal() == s2.Reveal(), err)
	}
	bad := "DHHC-1:00:" + strings.Repeat("QUFB", 12) + ":"
	secret = bad
	if _, err := EnsureHostKey(ctx, cli, "b", local); err == nil || strings.Contains(err.Error(), bad[10:30]) {
		t.Errorf("malformed secret: %v (want an error that does not quote it)", err)
	}

	// Controller secrets: published with the host secret, read back by
	// AllNodeKeys; one equal to the host secret or malformed is refused
	// without quoting it; a record without one (an older node) has none.
	c1, _ := nvmf.GenerateSecret(32)
	nk := NodeKeys{Host: s2.Reveal(), Ctrl: c1.Reveal()}
	if got, err := EnsureNodeKeys(ctx, cli, "a", func() (NodeKeys, error) { return nk, nil }); err != nil || got != nk {
		t.Fatalf("EnsureNodeKeys: %v", err)
	}
	hm, cm, err := AllNodeKeys(ctx, cli)
	if err != nil || hm["a"].Reveal() != s2.Reveal() || cm["a"].Reveal() != c1.Reveal() || len(cm) != 1 {
		t.Fatalf("AllNodeKeys: host matches %v, ctrl matches %v, %d ctrl keys, %v", hm["a"].Reveal() == s2.Reveal(), cm["a"].Reveal() == c1.Reveal(), len(cm), err)
	}
	if out := fmt.Sprintf("%v %+v", hm, cm); strings.Contains(out, c1.Reveal()[10:40]) || strings.Contains(out, s2.Reveal()[10:40]) {
		t.Fatalf("the key maps print a secret: %s", out)
	}
	for what, k := range map[string]NodeKeys{"equal": {Host: s2.Reveal(), Ctrl: s2.Reveal()}, "malformed": {Host: s2.Reveal(), Ctrl: bad}} {
		if _, err := EnsureNodeKeys(ctx, cli, "c", func() (NodeKeys, error) { return k, nil }); err == nil || strings.Contains(err.Error(), bad[10:30]) || strings.Contains(err.Error(), s2.Reveal()[10:30]) {
			t.Errorf("%s controller secret: %v (want an error that does not quote it)", what, err)
		}
	}
	if _, err := cli.Put(ctx, keys.HostKey("old"), `{"version":1,"secret":"`+s1.Reveal()+`"}`); err != nil {
		t.Fatal(err)
	}
	if hm, cm, err := AllNodeKeys(ctx, cli); err != nil || hm["old"] == "" || cm["old"] != "" {
		t.Fatalf("a record without a controller secret: %v", err)
	}
	if _, err := cli.Delete(ctx, keys.HostKey("old")); err != nil {
		t.Fatal(err)
	}

	if err := DeleteHostKey(ctx, cli, "a"); err != nil {
		t.Fatal(err)
	}
	if m, _ := HostKeys(ctx, cli); len(m) != 0 {
		t.Errorf("%d keys after delete", len(m))
	}
}

func TestCheckRefuses(t *testing.T) {
	for _, f := range []func(*model.Volume){
		func(v *model.Volume) { v.UUID = "ABCDEF00-0000-4000-8000-000000000001" },
		func(v *model.Volume) { v.Name = "a/b" },
		func(v *model.Volume) { v.Name = "" },
		func(v *model.Volume) { v.Members = v.Members[:2] },
		func(v *model.Volume) { v.Members[1].Slot = 2 },
		func(v *model.Volume) { v.Members[0].UUID = "x" },
		func(v *model.Volume) { v.State = "gone" },
		func(v *model.Volume) { v.K = 0 },
		func(v *model.Volume) { v.JournalBytes = -1 },
		func(v *model.Volume) { v.Members[1].Node, v.Members[1].Drive = "a", "a-d1" },
		func(v *model.Volume) { v.Attach = &model.AttachList{Nodes: []string{"a", "a"}} },
		func(v *model.Volume) { v.Attach = &model.AttachList{Nodes: []string{"../x"}} },
		func(v *model.Volume) { v.Attach = &model.AttachList{Nodes: []string{""}} },
		func(v *model.Volume) { v.Attach = &model.AttachList{Nodes: make([]string, MaxAttach+1)} },
	} {
		v := vol(uuidN(1), "v")
		f(&v)
		if err := check(v); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", v, err)
		}
	}
	for _, a := range []*model.AttachList{nil, {}, {Nodes: []string{"a", "b-1.x"}}} {
		v := vol(uuidN(1), "v")
		v.Attach = a
		if err := check(v); err != nil {
			t.Errorf("attach %+v: %v", a, err)
		}
	}
}

// TestDriveInOneVolume: two volumes of different names placed at once
// over one drive: exactly one is created, the other's error names the
// drive and the winner. A member change moves the claim.
func TestDriveInOneVolume(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	wg.Add(2)
	kv := barrierKV{cli, &wg}
	a, b := vol(uuidN(1), "a"), vol(uuidN(2), "b")
	b.Members[0].Drive, b.Members[1].Drive = "a-d9", "b-d9" // shares c-d1 with a
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i, v := range []model.Volume{a, b} {
		done.Add(1)
		go func() {
			defer done.Done()
			errs[i] = Create(ctx, kv, v)
		}()
	}
	done.Wait()
	winner, loser := 0, 1
	if errs[0] != nil {
		winner, loser = 1, 0
	}
	names := []string{"a", "b"}
	if errs[winner] != nil || !errors.Is(errs[loser], ErrExists) {
		t.Fatalf("creates sharing a drive: %v, %v; want exactly one ErrExists", errs[0], errs[1])
	}
	if want := fmt.Sprintf("drive c-d1 of node c is a member of volume %q (%s)", names[winner], uuidN(winner+1)); !strings.Contains(errs[loser].Error(), want) {
		t.Errorf("loser's error %q does not say %q", errs[loser], want)
	}
	if _, _, ok, _ := GetByName(ctx, cli, names[loser]); ok {
		t.Error("the loser's name claim was written")
	}

	// The winner's slot 2 moves from c-d1 to c-d2; c-d1 is free again.
	w := uuidN(winner + 1)
	other := vol(uuidN(3), "c")
	other.Members[0].Drive, other.Members[1].Drive = "a-d8", "b-d8"
	if _, err := Modify(ctx, cli, w, func(v *model.Volume) error { v.Members[2].Drive = "c-d2"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := Create(ctx, cli, other); err != nil {
		t.Fatalf("create over the released c-d1: %v", err)
	}
	// Moving onto a drive of another volume is refused, nothing written.
	_, err := Modify(ctx, cli, w, func(v *model.Volume) error { v.Members[2].Drive = "c-d1"; return nil })
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), `member of volume "c"`) {
		t.Errorf("move onto c's drive: %v", err)
	}
	if v, _, _, _ := Get(ctx, cli, w); v.Members[2].Drive != "c-d2" {
		t.Errorf("slot 2 is on %s after the refused move", v.Members[2].Drive)
	}
	for _, u := range []string{w, uuidN(3)} {
		if err := Delete(ctx, cli, u); err != nil {
			t.Fatal(err)
		}
	}
	if resp, _ := cli.Get(ctx, keys.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); resp.Count != 0 {
		t.Errorf("%d keys left after deleting every volume", resp.Count)
	}
}
