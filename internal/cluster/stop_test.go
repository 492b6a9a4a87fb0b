package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/store"
)

// TestMemberStopUnderKeepalives: with etcd's authentication on, a lease
// keepalive's permission check reads the member's backend; one that
// arrives after the member closed its backend panicked in bbolt and took
// the process down (store.servers: the client gRPC servers now stop
// first). A member is stopped 15 times while four clients of its own
// certificate (another client than the node's, which Close closes
// first) hammer keepalives and reads at it.
func TestMemberStopUnderKeepalives(t *testing.T) {
	var c clock
	for i := 0; i < 15; i++ {
		n1 := newNode(t, "n1", &c)
		n1.o.Members = 1
		if err := n1.Init(ctxT(t), "test"); err != nil {
			t.Fatal(err)
		}
		tlsc, err := n1.files.ClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		cli, err := store.Connect([]string{n1.url(n1.o.ClientPort)}, tlsc, nil)
		if err != nil {
			t.Fatal(err)
		}
		lease, err := cli.Grant(ctxT(t), 30)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
					cli.KeepAliveOnce(rctx, lease.ID)
					cli.Get(rctx, "/fabraid/v1/cluster")
					rcancel()
				}
			}()
		}
		time.Sleep(time.Duration(20+10*i) * time.Millisecond)
		n1.Close()
		cancel()
		wg.Wait()
		cli.Close()
	}
}
