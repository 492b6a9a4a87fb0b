package clusterplane

import (
	"context"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/plugins/backend"
)

// listTarget is a target backend whose List shows one drive and one
// volume export, each allowing one host with a host key and ctrl (the
// volume export's controller key is vol when set).
type listTarget struct {
	backend.Backend
	ctrl, vol string
}

func (l *listTarget) List(_ context.Context, scope string) ([]backend.Export, error) {
	k := l.ctrl
	if scope == volid.NQNPrefix && l.vol != "" {
		k = l.vol
	}
	return []backend.Export{{NQN: scope + "x", Hosts: []backend.Host{{NQN: "nqn.h", DHCHAPKey: "DHHC-1:00:h:", DHCHAPCtrlKey: backend.Secret(k)},
		{NQN: "nqn.nokey"}}}}, nil
}

// TestPublishRotatedKey: a rotated controller key goes to etcd only once
// every host entry with a host key on this node's target, drive and
// volume exports alike, presents it; before, etcd keeps the old one (the
// hosts must not ask for the new key yet). enable-rbac on an etcd member
// succeeds, twice.
func TestPublishRotatedKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := initPlane(t, "n1")
	old, _ := d.cluster.CtrlSecret()
	lt := &listTarget{ctrl: old.Reveal()}
	d.loop.x = &exporter.Exporter{Target: lt}
	etcdCtrl := func() string {
		_, cm, err := volumes.AllNodeKeys(ctx, d.cluster.Client())
		if err != nil {
			t.Fatal(err)
		}
		return cm["n1"].Reveal()
	}
	if err := d.publishRotatedKey(ctx); err != nil || etcdCtrl() != old.Reveal() {
		t.Fatalf("nothing rotated: %v", err)
	}
	if err := d.cluster.RotateCtrlSecret(); err != nil {
		t.Fatal(err)
	}
	cur, _ := d.cluster.CtrlSecret()
	for _, tc := range []struct {
		what      string
		ctrl, vol string
		published bool
	}{
		{"target presents the old key", old.Reveal(), "", false},
		{"drive exports rotated, volume exports not yet", cur.Reveal(), old.Reveal(), false},
		{"every export presents the new key", cur.Reveal(), "", true},
	} {
		lt.ctrl, lt.vol = tc.ctrl, tc.vol
		if err := d.publishRotatedKey(ctx); err != nil {
			t.Fatal(err)
		}
		if got := etcdCtrl() == cur.Reveal(); got != tc.published || d.cluster.CtrlPending() == tc.published {
			t.Fatalf("%s: published %v, pending %v; want published %v", tc.what, got, d.cluster.CtrlPending(), tc.published)
		}
	}
	for range 2 {
		if err := d.EnableRBAC(ctx); err != nil {
			t.Fatalf("enable-rbac: %v", err)
		}
	}
}
