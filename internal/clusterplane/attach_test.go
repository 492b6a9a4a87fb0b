package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/registry"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// TestAttach runs the attach list against real embedded etcd: n1 attaches
// volume v (owner n1) to n3 only; the record says so, n1's volume manager
// plan no longer consumes v and v's export admits n3's host only; an
// unknown node, a node named twice and --all with names are refused and
// change nothing; --all removes the list and n1 consumes v again.
func TestAttach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pl := initPlane(t, "n1")
	cli := pl.cluster.Client()
	rec := registry.Node{Name: "n3", Domain: "n3", HostNQN: "nqn.host:n3", ClusterAddress: "127.0.0.9", StorageAddresses: []string{"127.0.0.9"}}
	if err := registry.Put(ctx, cli, rec); err != nil {
		t.Fatal(err)
	}
	vol := model.Volume{UUID: "00000000-0000-4000-8000-000000000001", Name: "v", K: 1, M: 1, Groups: 1, Owner: "n3", State: model.VolumeReady, MemberSize: 1 << 30}
	for i, n := range []string{"n1", "n3"} {
		vol.Members = append(vol.Members, model.VolumeMember{Slot: i, Node: n, Domain: n, Drive: fmt.Sprintf("%s-d", n), UUID: fmt.Sprintf("00000000-0000-4000-8000-00000000010%d", i)})
	}
	if err := volumes.Create(ctx, cli, vol); err != nil {
		t.Fatal(err)
	}
	consumed := func() (bool, []string) {
		t.Helper()
		v, err := pl.currentView(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := managerPlan(v, plan.Import{}, nil)
		u := [16]byte{6: 0x40, 8: 0x80, 15: 1}
		hosts, restricted := p.Attached[u]
		if !restricted {
			hosts = nil
		}
		return len(p.Consumers) == 1 && p.Consumers[0].UUID == u, hosts
	}
	if c, hosts := consumed(); !c || hosts != nil {
		t.Fatalf("before: consumed %v, admitted %v; want consumed, every host", c, hosts)
	}
	out, err := pl.Attach(ctx, "v", api.AttachRequest{Nodes: []string{"n3"}})
	if err != nil || out.Attached == nil || !reflect.DeepEqual(out.Attached.Nodes, []string{"n3"}) {
		t.Fatalf("attach to n3: %+v, %v", out.Attached, err)
	}
	if c, hosts := consumed(); c || !reflect.DeepEqual(hosts, []string{"nqn.host:n3"}) {
		t.Fatalf("attached to n3: n1 consumes %v, admitted %v; want not, n3's host only", c, hosts)
	}
	for _, q := range []api.AttachRequest{{Nodes: []string{"n7"}}, {Nodes: []string{"n3", "n3"}}, {All: true, Nodes: []string{"n1"}}} {
		if _, err := pl.Attach(ctx, "v", q); !errors.Is(err, volmgr.ErrInvalid) {
			t.Errorf("attach %+v: %v, want ErrInvalid", q, err)
		}
	}
	if got, _, _, err := volumes.Get(ctx, cli, vol.UUID); err != nil || got.Attach == nil || !reflect.DeepEqual(got.Attach.Nodes, []string{"n3"}) {
		t.Fatalf("record after the refusals: %+v, %v", got.Attach, err)
	}
	if out, err := pl.Attach(ctx, "v", api.AttachRequest{All: true}); err != nil || out.Attached != nil {
		t.Fatalf("attach --all: %+v, %v", out.Attached, err)
	}
	if c, hosts := consumed(); !c || hosts != nil {
		t.Fatalf("after --all: consumed %v, admitted %v; want consumed, every host", c, hosts)
	}
}
