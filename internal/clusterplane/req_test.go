package clusterplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
)

// TestClusterRequests: engine operations asked on a node that does not
// own the volume go to the owner through etcd and come back with the
// owner's answer: the same HTTP code and text as asked on the owner
// itself. Refusals that need no owner come from the node asked; an owner
// that does not answer in time leaves an accepted request (202); replace
// moves the member and the drive claims in etcd, and the request waits
// while the owner runs no engine for it.
func TestClusterRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d1, d2 := twoPlanes(t)
	cli := d1.cluster.Client()
	// n3 and n4: registered and alive, no daemon; n4 has free drives.
	for _, n := range []string{"n3", "n4"} {
		rec := registry.Node{Name: n, Domain: n, HostNQN: "nqn.host:" + n, ClusterAddress: "127.0.0.9"}
		for i := range 2 {
			rec.Drives = append(rec.Drives, model.Drive{ID: fmt.Sprintf("%s-d%d", n, i), Size: 1 << 30})
		}
		if err := registry.Put(ctx, cli, rec); err != nil {
			t.Fatal(err)
		}
		hb, err := registry.StartHeartbeat(ctx, cli, n, 10, 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hb.Close(context.Background()) })
	}
	mk := func(n int, name, owner string) model.Volume {
		rec := model.Volume{UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", n), Name: name, K: 2, M: 1, Groups: 1, Owner: owner, State: model.VolumeReady, MemberSize: 1 << 30}
		for i, node := range []string{"n1", "n2", "n3"} {
			rec.Members = append(rec.Members, model.VolumeMember{Slot: i, Node: node, Domain: node, Drive: fmt.Sprintf("%s-v%d", node, n), UUID: fmt.Sprintf("00000000-0000-4000-8000-0000000%02d%03d", n, i)})
		}
		if err := volumes.Create(ctx, cli, rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	v := mk(1, "v", "n1")
	mk(2, "w", "n9")                 // owner not registered
	mk3UUID := mk(3, "x", "n3").UUID // owner alive, runs nothing
	d1.requestHook(cli)              // n1's request worker (its reconcile would start it)
	d2.loop.req.wait = 500 * time.Millisecond

	// Same answer on the owner and through a request.
	own := opCall(t, d1, "POST", "/v1/volumes/v/scrub", api.OpRequest{}, 404, nil)
	other := opCall(t, d2, "POST", "/v1/volumes/v/scrub", api.OpRequest{}, 404, nil)
	if own != other || !strings.Contains(other, "no such volume: "+v.UUID) {
		t.Errorf("scrub: on the owner %s, on n2 %s", own, other)
	}
	rs, err := volumes.Requests(ctx, cli)
	if err != nil || len(rs) != 1 || rs[0].State != model.RequestFailed || rs[0].By != "n1" || rs[0].RequestedBy != "n2" || rs[0].Code != 404 {
		t.Fatalf("requests after the scrub: %+v %v", rs, err)
	}
	for _, c := range []struct {
		path string
		q    api.OpRequest
		code int
		want string
	}{
		{"/v1/volumes/v/fail", api.OpRequest{Slot: 3}, 400, `volume \"v\" has slots 0..2, not 3`},
		{"/v1/volumes/v/format", api.OpRequest{}, 400, `unknown operation \"format\"`},
		{"/v1/volumes/nope/fail", api.OpRequest{}, 404, "no such volume: nope"},
		{"/v1/volumes/w/fail", api.OpRequest{Slot: 1}, 409, `volume \"w\": its owner n9 is down`},
		{"/v1/volumes/v/replace", api.OpRequest{Slot: 1}, 409, "owner n1 reports no state of slot 1 (volume stopped no such volume"},
		{"/v1/volumes/x/replace", api.OpRequest{Slot: 1}, 409, "owner n3 publishes no status"},
	} {
		if body := opCall(t, d2, "POST", c.path, c.q, c.code, nil); !strings.Contains(body, c.want) {
			t.Errorf("%s %+v: %s, want %q", c.path, c.q, body, c.want)
		}
	}
	if rs, _ := volumes.Requests(ctx, cli); len(rs) != 1 {
		t.Fatalf("refusals wrote requests: %+v", rs)
	}
	// An owner that does not answer: accepted.
	var acc api.OpReply
	opCall(t, d2, "POST", "/v1/volumes/x/fail", api.OpRequest{Slot: 0}, 202, &acc)
	if acc.Request == "" || acc.Owner != "n3" || acc.State != model.RequestPending || !strings.Contains(acc.Message, "request "+acc.Request+" accepted, owner n3 is carrying it out") {
		t.Errorf("fail with an owner that does not answer: %+v", acc)
	}
	// Following it: pending until the owner's result, then that result.
	var pend api.OpReply
	path := "/v1/volumes/x/requests/" + acc.Request
	opCall(t, d2, "GET", path, api.OpRequest{}, 202, &pend)
	if pend.Request != acc.Request || pend.State != model.RequestPending {
		t.Errorf("GET of a pending request: %+v", pend)
	}
	sr, ok, err := volumes.GetRequest(ctx, cli, mk3UUID, acc.Request)
	if !ok || err != nil {
		t.Fatalf("request %s: %v %v", acc.Request, ok, err)
	}
	if _, ok, err := volumes.Finish(ctx, cli, sr, 409, fmt.Errorf("slot 0 is busy"), time.Now()); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if body := opCall(t, d2, "GET", path, api.OpRequest{}, 409, nil); !strings.Contains(body, "slot 0 is busy") {
		t.Errorf("GET of a refused request: %s", body)
	}
	if body := opCall(t, d2, "GET", "/v1/volumes/x/requests/nope", api.OpRequest{}, 404, nil); !strings.Contains(body, "nope") {
		t.Errorf("GET of an unknown request: %s", body)
	}

	// Replace: slot 1 failed per the owner's status.
	st := model.VolumeStatus{UUID: v.UUID, Name: "v", Owner: "n1", State: "degraded", Members: []model.VolumeMemberStatus{
		{Slot: 0, Node: "n1", Role: "active"}, {Slot: 1, Node: "n2", Role: "failed", Failure: "io-error"}, {Slot: 2, Node: "n3", Role: "active"}}}
	if err := volumes.PutStatus(ctx, cli, 0, st); err != nil {
		t.Fatal(err)
	}
	if body := opCall(t, d2, "POST", "/v1/volumes/v/replace", api.OpRequest{Slot: 2}, 400, nil); !strings.Contains(body, "slot 2 is active: fail it first") {
		t.Errorf("replace of an active member: %s", body)
	}
	if body := opCall(t, d2, "POST", "/v1/volumes/v/replace", api.OpRequest{Slot: 1, Node: "n3"}, 400, nil); !strings.Contains(body, "no free drive in a domain that keeps 2+1 with at most 1 chunks per domain") ||
		!strings.Contains(body, "n3:n3-d0 (domain n3 holds 1 of the group's members already)") {
		t.Errorf("replace onto n3: %s", body)
	}
	var rep api.OpReply
	opCall(t, d2, "POST", "/v1/volumes/v/replace", api.OpRequest{Slot: 1}, 202, &rep)
	if rep.Node != "n4" || rep.Drive != "n4-d0" || rep.Owner != "n1" || rep.Request == "" {
		t.Fatalf("replace: %+v", rep)
	}
	got, _, _, _ := volumes.Get(ctx, cli, v.UUID)
	if got.Members[1] != (model.VolumeMember{Slot: 1, Node: "n4", Domain: "n4", Drive: "n4-d0"}) || got.Members[0] != v.Members[0] {
		t.Fatalf("record after replace: %+v", got.Members)
	}
	for k, want := range map[string]int{keys.DriveClaim("n2", "n2-v1"): 0, keys.DriveClaim("n4", "n4-d0"): 1} {
		if resp, err := cli.Get(ctx, k); err != nil || len(resp.Kvs) != want {
			t.Errorf("claim %s: %d keys (%v), want %d", k, len(resp.Kvs), err, want)
		}
	}
	// The owner's reconcile finds the new drive (here a path) for an
	// engine it does not run (yet): the request waits for the engine.
	view, err := readView(ctx, cli, "n1")
	if err != nil {
		t.Fatal(err)
	}
	view.Held = map[string]uint64{v.UUID: 1} // n1 holds v's owner key
	imp := plan.ImporterInput(view.View, d1.mgr.HostIdentity(), nil)
	paths := map[[16]byte][]string{imp.Volumes[0].UUID: {"/dev/a", "/dev/new", "/dev/c"}}
	for range 2 {
		if errs := d1.replaceMembers(ctx, cli, imp, paths); len(errs) != 1 || !strings.Contains(errs[0].Error(), "replace slot 1 with n4:n4-d0: engine not running") {
			t.Fatalf("owner's replace: %v", errs)
		}
	}
	r, ok, err := volumes.GetRequest(ctx, cli, v.UUID, rep.Request)
	if !ok || err != nil || r.State != model.RequestPending {
		t.Fatalf("replace request while the engine is not running: %+v %v %v", r, ok, err)
	}
}

// TestRequestResultWrittenAgain: a request the owner carried out whose
// result it could not write (etcd without a leader: the worker's watch
// also ends, and a new worker starts) gets its result on a later pass,
// not "interrupted"; a request left running by the node that this
// process did not carry out still fails.
func TestRequestResultWrittenAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d1, _ := twoPlanes(t)
	cli := d1.cluster.Client()
	rec := model.Volume{UUID: "00000000-0000-4000-8000-000000000007", Name: "v", K: 2, M: 1, Groups: 1, Owner: "n1", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"n1", "n2", "n3"} {
		rec.Members = append(rec.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: n + "-d0", UUID: fmt.Sprintf("00000000-0000-4000-8000-0000000007%02d", i)})
	}
	if err := volumes.Create(ctx, cli, rec); err != nil {
		t.Fatal(err)
	}
	claimed := func(id string) volumes.StoredRequest {
		r := model.Request{ID: id, Volume: rec.UUID, Op: "scrub", RequestedBy: "n2", Created: time.Now().UTC()}
		if err := volumes.Submit(ctx, cli, r, nil); err != nil {
			t.Fatal(err)
		}
		sr, _, err := volumes.GetRequest(ctx, cli, rec.UUID, id)
		if err != nil {
			t.Fatal(err)
		}
		c, ok, err := volumes.Claim(ctx, cli, sr, "n1")
		if !ok || err != nil {
			t.Fatalf("claim %s: %v %v", id, ok, err)
		}
		return c
	}
	done := claimed("00000000000000d1")
	claimed("00000000000000d2") // running by n1, no result in this process
	d1.loop.req.unfinished = map[string]unfinishedRequest{done.ID: {req: done}}
	if err := d1.carryOutRequests(ctx, cli); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"00000000000000d1": model.RequestDone, "00000000000000d2": model.RequestFailed} {
		r, _, err := volumes.GetRequest(ctx, cli, rec.UUID, id)
		if err != nil || r.State != want {
			t.Errorf("request %s: %+v %v, want %s", id, r.Request, err, want)
		}
	}
	if len(d1.loop.req.unfinished) != 0 {
		t.Errorf("results left to write: %+v", d1.loop.req.unfinished)
	}
}
