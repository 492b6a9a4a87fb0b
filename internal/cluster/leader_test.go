package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/store"
)

// MoveEtcdLeader hands the leadership of three real embedded members from
// the leader to another voting member; a follower cannot hand it.
func TestMoveEtcdLeader(t *testing.T) {
	n1, n2, n3 := threeMembers(t, &clock{})
	nodes := []*Node{n1, n2, n3}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ms, err := store.Members(ctx, n1.Client(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i, n := range nodes {
		if n.LeadsEtcd() {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no node leads")
	}
	from, to := nodes[leader], nodes[(leader+1)%3]
	var target store.MemberStatus
	for _, m := range ms {
		if m.Name == to.o.Name {
			target = m
		}
	}
	if err := nodes[(leader+2)%3].MoveEtcdLeader(ctx, target); err == nil {
		t.Fatal("a follower handed the leadership away")
	}
	if err := from.MoveEtcdLeader(ctx, target); err != nil {
		t.Fatal(err)
	}
	if !to.LeadsEtcd() || from.LeadsEtcd() {
		t.Fatalf("after the move: %s leads %v, %s leads %v", to.o.Name, to.LeadsEtcd(), from.o.Name, from.LeadsEtcd())
	}
	client := &Node{}
	if err := client.MoveEtcdLeader(ctx, target); !errors.Is(err, ErrNotMember) {
		t.Fatalf("a node without a member: %v, want %v", err, ErrNotMember)
	}
}
