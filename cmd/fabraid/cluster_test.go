package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

func TestPrintClusterStatus(t *testing.T) {
	s := api.ClusterStatus{Cluster: "c1", Etcd: "embedded", Leader: "n1", Healthy: false,
		Members: []model.MemberStatus{
			{ID: "a1", Name: "n1", Leader: true, Healthy: true, PeerURLs: []string{"https://10.0.0.1:2380"}},
			{ID: "b2", Name: "n2", Healthy: false, Error: "context deadline exceeded"},
			{ID: "c3", Name: "n3", Learner: true, Healthy: true},
		},
		Nodes: []model.NodeStatus{
			{Node: model.Node{Name: "n1", Domain: "rack1", ClusterAddress: "10.0.0.1", Drives: []model.Drive{{ID: "S1", Size: 3 << 40}}}, Alive: true},
			{Node: model.Node{Name: "n2", Domain: "n2", ClusterAddress: "10.0.0.2"}},
		},
		Volumes: []model.VolumeInfo{
			{Name: "v1", UUID: "0f6c5a52-0000-4000-8000-000000000001", K: 4, M: 2, Groups: 1, Owner: "n1", Record: "ready", State: "rebuilding",
				Task: "resync", Progress: 42, ResyncBytes: 4 << 20,
				Degraded: []model.VolumeMemberStatus{{Slot: 3, Node: "n2", Role: "failed", Failure: "unreachable"}, {Slot: 4, Node: "n2", Role: "rebuilding"}}},
			{Name: "v2", UUID: "0f6c5a52-0000-4000-8000-000000000002", K: 2, M: 1, Groups: 2, Owner: "n2", Record: "ready", State: "unknown"},
		},
	}
	var b bytes.Buffer
	printClusterStatus(&b, s)
	out := b.String()
	for _, want := range []string{"cluster c1 (embedded etcd): UNHEALTHY, leader n1", "n1  ", "leader", "down: context deadline exceeded", "learner", "rack1", "S1(3.0TiB)", "DEAD",
		"VOLUME", "4+2    n1     rebuilding (resync 42%) resynced 4.0MiB  3@n2(unreachable) 4@n2(rebuilding)",
		"0f6c5a52-0000-4000-8000-000000000002  2x2+1  n2     unknown"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}

func TestPrintClusterStatusNoVolumes(t *testing.T) {
	var b bytes.Buffer
	printClusterStatus(&b, api.ClusterStatus{Cluster: "c1", Healthy: true})
	if !strings.Contains(b.String(), "no volumes") {
		t.Errorf("output lacks \"no volumes\":\n%s", b.String())
	}
}
