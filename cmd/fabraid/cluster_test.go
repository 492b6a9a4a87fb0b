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
	}
	var b bytes.Buffer
	printClusterStatus(&b, s)
	out := b.String()
	for _, want := range []string{"cluster c1 (embedded etcd): UNHEALTHY, leader n1", "n1  ", "leader", "down: context deadline exceeded", "learner", "rack1", "S1(3.0TiB)", "DEAD"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}
