package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

func req(uuid, op string, slot int) model.Request {
	return model.Request{ID: NewRequestID(), Volume: uuid, Op: op, Slot: slot, RequestedBy: "b", Created: time.Now().UTC()}
}

// readyVol creates volume uuidN(1) "v", ready, with member UUIDs.
func readyVol(ctx context.Context, t *testing.T, kv clientv3.KV) model.Volume {
	t.Helper()
	v := vol(uuidN(1), "v")
	v.State = model.VolumeReady
	for i := range v.Members {
		v.Members[i].UUID = uuidN(0x100 + i)
	}
	if err := Create(ctx, kv, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRequestLifeCycle: requests are refused for an unknown volume and
// one that is not ready, and by the caller's check against the record;
// a request is claimed by exactly one of two racing owners, its result
// reaches a waiter, a request left running by a restarted owner and one
// pending too long fail without being carried out, and requests go with
// their volume and with age.
func TestRequestLifeCycle(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	if err := Submit(ctx, cli, req(uuidN(1), "scrub", 0), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("request for an unknown volume: %v", err)
	}
	if err := Create(ctx, cli, vol(uuidN(1), "v")); err != nil {
		t.Fatal(err)
	}
	if err := Submit(ctx, cli, req(uuidN(1), "scrub", 0), nil); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), `volume "v" is creating`) {
		t.Fatalf("request for a volume being created: %v", err)
	}
	if _, err := Modify(ctx, cli, uuidN(1), func(v *model.Volume) error { v.State = model.VolumeReady; return nil }); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("slot 7 out of range")
	if err := Submit(ctx, cli, req(uuidN(1), "fail", 7), func(model.Volume) error { return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("check: %v", err)
	}
	if err := Submit(ctx, cli, model.Request{ID: "x", Volume: uuidN(1), Op: "fail"}, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
	if err := Submit(ctx, cli, model.Request{ID: NewRequestID(), Volume: uuidN(1), Op: "format"}, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad op: %v", err)
	}
	if rs, err := Requests(ctx, cli); err != nil || len(rs) != 0 {
		t.Fatalf("refused requests were written: %+v %v", rs, err)
	}

	// Two requests, in order; two owners race to claim the first.
	r1, r2 := req(uuidN(1), "fail", 2), req(uuidN(1), "scrub", 0)
	for _, r := range []model.Request{r1, r2} {
		if err := Submit(ctx, cli, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := Requests(ctx, cli)
	if err != nil || len(rs) != 2 || rs[0].ID != r1.ID || rs[1].ID != r2.ID || rs[0].State != model.RequestPending || rs[0].Version != model.RequestVersion {
		t.Fatalf("requests: %+v %v", rs, err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	kv := barrierKV{cli, &wg}
	won := make([]bool, 2)
	var claimed [2]StoredRequest
	var done sync.WaitGroup
	for i, by := range []string{"a", "z"} {
		done.Add(1)
		go func() {
			defer done.Done()
			var err error
			claimed[i], won[i], err = Claim(ctx, kv, rs[0], by)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	done.Wait()
	if won[0] == won[1] {
		t.Fatalf("claims won: %v, want exactly one", won)
	}
	c := claimed[0]
	if won[1] {
		c = claimed[1]
	}
	if _, ok, _ := Claim(ctx, cli, c, "a"); ok {
		t.Fatal("a running request was claimed again")
	}

	// A waiter started before the result gets it.
	got := make(chan model.Request, 1)
	go func() {
		r, err := WaitRequest(ctx, cli, uuidN(1), r1.ID)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	time.Sleep(100 * time.Millisecond) // let the watch start (the test passes either way)
	if _, ok, err := Finish(ctx, cli, c, 409, errors.New("volume v: slot 2 is failed already"), time.Now()); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if r := <-got; r.State != model.RequestFailed || r.Code != 409 || r.Error != "volume v: slot 2 is failed already" || r.By != c.By || r.Finished.IsZero() {
		t.Fatalf("waiter got %+v", r)
	}
	if _, ok, _ := Finish(ctx, cli, c, 0, nil, time.Now()); ok {
		t.Fatal("a finished request was finished again from a stale read")
	}
	// A waiter that times out gets the request as it was, and ctx's error.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	r, err := WaitRequest(wctx, cli, uuidN(1), r2.ID)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || r.State != model.RequestPending {
		t.Fatalf("wait for an unfinished request: %+v %v", r, err)
	}

	// Restart and age: r2 left running by a; r3 pending for 11 minutes.
	rs, _ = Requests(ctx, cli)
	if _, ok, err := Claim(ctx, cli, rs[1], "a"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	r3 := req(uuidN(1), "rebuild", 0)
	r3.Created = time.Now().Add(-11 * time.Minute)
	if err := Submit(ctx, cli, r3, nil); err != nil {
		t.Fatal(err)
	}
	rs, _ = Requests(ctx, cli)
	if err := FailStale(ctx, cli, rs, "a", time.Now(), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	rs, _ = Requests(ctx, cli)
	if len(rs) != 3 || rs[1].State != model.RequestFailed || !strings.Contains(rs[1].Error, "interrupted: fabraidd on a restarted") ||
		rs[2].State != model.RequestFailed || !strings.Contains(rs[2].Error, "expired: not carried out within 10m0s") {
		t.Fatalf("after FailStale: %+v", rs)
	}

	// Cleanup: an hour later everything goes; a deleted volume's at once.
	if n, err := CleanupRequests(ctx, cli, rs, []model.Volume{{UUID: uuidN(1)}}, time.Now(), time.Hour); err != nil || n != 0 {
		t.Fatalf("cleanup of fresh requests: %d %v", n, err)
	}
	if n, err := CleanupRequests(ctx, cli, rs, []model.Volume{{UUID: uuidN(1)}}, time.Now().Add(2*time.Hour), time.Hour); err != nil || n != 3 {
		t.Fatalf("cleanup after 2 h: %d %v", n, err)
	}
	if err := Submit(ctx, cli, req(uuidN(1), "scrub", 0), nil); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, cli, uuidN(1)); err != nil {
		t.Fatal(err)
	}
	rs, _ = Requests(ctx, cli)
	if n, err := CleanupRequests(ctx, cli, rs, nil, time.Now(), time.Hour); err != nil || n != 1 {
		t.Fatalf("cleanup of a deleted volume's request: %d %v", n, err)
	}
	if rs, _ := Requests(ctx, cli); len(rs) != 0 {
		t.Fatalf("left: %+v", rs)
	}
	if _, err := WaitRequest(ctx, cli, uuidN(1), r1.ID); !errors.Is(err, ErrRequestGone) {
		t.Fatalf("wait for a deleted request: %v", err)
	}
}

// TestSubmitConcurrent: requests of several nodes at once all land, also
// while the record changes under them (Submit retries on its revision),
// and none lands once the volume is being deleted.
func TestSubmitConcurrent(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	readyVol(ctx, t, cli)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 1 {
				_, errs[i] = Modify(ctx, cli, uuidN(1), func(v *model.Volume) error { v.ChunkSize += 4096; return nil })
				return
			}
			errs[i] = Submit(ctx, cli, req(uuidN(1), "scrub", 0), nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%d: %v", i, err)
		}
	}
	if rs, err := Requests(ctx, cli); err != nil || len(rs) != 4 {
		t.Fatalf("requests: %d %v", len(rs), err)
	}
	if _, err := Modify(ctx, cli, uuidN(1), func(v *model.Volume) error { v.State = model.VolumeDeleting; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := Submit(ctx, cli, req(uuidN(1), "scrub", 0), nil); !errors.Is(err, ErrNotReady) {
		t.Fatalf("request for a volume being deleted: %v", err)
	}
}

// TestSubmitReplace: the record's member, both drive claims and the
// request change in one transaction; a new drive that another volume
// holds refuses it all.
func TestSubmitReplace(t *testing.T) {
	cli := etcdtest.Start(t)
	ctx := ctxT(t)
	v := readyVol(ctx, t, cli)
	w := vol(uuidN(2), "w")
	for i := range w.Members {
		w.Members[i].Drive = w.Members[i].Node + "-d2"
	}
	if err := Create(ctx, cli, w); err != nil {
		t.Fatal(err)
	}
	claim := func(node, drive string) string {
		resp, err := cli.Get(ctx, keys.DriveClaim(node, drive))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return holder(resp.Kvs[0].Value)
	}
	move := func(drive string) func(*model.Volume) error {
		return func(v *model.Volume) error {
			v.Members[1] = model.VolumeMember{Slot: 1, Node: "b", Domain: "b", Drive: drive}
			return nil
		}
	}
	r := req(uuidN(1), "replace", 1)
	r.Node, r.Drive = "b", "b-d2"
	if _, err := SubmitReplace(ctx, cli, r, move("b-d2")); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), `drive b-d2 of node b is a member of volume "w"`) {
		t.Fatalf("replace onto w's drive: %v", err)
	}
	got, _, _, _ := Get(ctx, cli, uuidN(1))
	if !reflect.DeepEqual(got.Members, v.Members) || claim("b", "b-d1") != uuidN(1) || claim("b", "b-d2") != uuidN(2) {
		t.Fatalf("a refused replace changed something: %+v, claims %q %q", got.Members, claim("b", "b-d1"), claim("b", "b-d2"))
	}
	if rs, _ := Requests(ctx, cli); len(rs) != 0 {
		t.Fatalf("a refused replace wrote its request: %+v", rs)
	}
	r.Drive = "b-d3"
	out, err := SubmitReplace(ctx, cli, r, move("b-d3"))
	if err != nil {
		t.Fatal(err)
	}
	got, _, _, _ = Get(ctx, cli, uuidN(1))
	if !reflect.DeepEqual(got, out) || got.Members[1] != (model.VolumeMember{Slot: 1, Node: "b", Domain: "b", Drive: "b-d3"}) || got.Members[0].UUID != uuidN(0x100) {
		t.Fatalf("record after replace: %+v (returned %+v)", got, out)
	}
	if claim("b", "b-d1") != "" || claim("b", "b-d3") != uuidN(1) {
		t.Fatalf("claims after replace: b-d1 %q, b-d3 %q", claim("b", "b-d1"), claim("b", "b-d3"))
	}
	if rs, _ := Requests(ctx, cli); len(rs) != 1 || rs[0].ID != r.ID || rs[0].Drive != "b-d3" || rs[0].State != model.RequestPending {
		t.Fatalf("requests after replace: %+v", rs)
	}
	// Not ready: refused before f runs.
	if _, err := SubmitReplace(ctx, cli, req(uuidN(2), "replace", 0), move("x")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("replace without node and drive: %v", err)
	}
	r2 := req(uuidN(2), "replace", 0)
	r2.Node, r2.Drive = "a", "a-d9"
	if _, err := SubmitReplace(ctx, cli, r2, func(*model.Volume) error { t.Error("f ran for a volume being created"); return nil }); !errors.Is(err, ErrNotReady) {
		t.Fatalf("replace in a volume being created: %v", err)
	}
}

// FuzzDecodeRequest: the decoder never panics, and an accepted request
// is valid and survives a round trip.
func FuzzDecodeRequest(f *testing.F) {
	r := req(uuidN(1), "replace", 3)
	r.Node, r.Drive, r.Version, r.State = "c", "c-d3", 1, model.RequestPending
	b, _ := json.Marshal(r)
	f.Add(b)
	f.Add([]byte(`{"version":1,"id":"0123456789abcdef","volume":"` + uuidN(1) + `","op":"scrub","state":"done","code":409,"error":"x"}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"id":"../../x","volume":"` + uuidN(1) + `","op":"fail","state":"pending"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if err := checkRequest(r); err != nil {
			t.Fatalf("accepted a request check refuses: %v", err)
		}
		if k := keys.Request(r.Volume, r.ID); strings.Count(k, "/") != strings.Count(keys.RequestsPrefix, "/")+1 {
			t.Fatalf("key %q of an accepted request", k)
		}
		b2, _ := json.Marshal(r)
		r2, err := DecodeRequest(b2)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v -> %+v, %v", r, r2, err)
		}
	})
}
