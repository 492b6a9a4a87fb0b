package owner

import (
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

func TestList(t *testing.T) {
	ctx := ctxT(t)
	cli := client(t, startEtcd(t))
	s, err := NewSession(ctx, cli, Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const v1, v2 = "0d7f3a52-6b1e-4c1a-9a57-3c4f8c2b9e01", "0d7f3a52-6b1e-4c1a-9a57-3c4f8c2b9e02"
	e1, err := Acquire(ctx, s, v1, "a")
	if err != nil {
		t.Fatal(err)
	}
	e2, err := Acquire(ctx, s, v2, "b")
	if err != nil {
		t.Fatal(err)
	}
	hs, err := List(ctx, cli)
	if err != nil || len(hs) != 2 || hs[v1].Node != "a" || hs[v1].Epoch != e1 || hs[v2].Node != "b" || hs[v2].Epoch != e2 {
		t.Fatalf("List = %+v, %v; want a at %d, b at %d", hs, err, e1, e2)
	}
	if _, err := cli.Put(ctx, keys.Owner(v2), `{"version":7}`); err != nil {
		t.Fatal(err)
	}
	if _, err := List(ctx, cli); err == nil || !strings.Contains(err.Error(), keys.Owner(v2)) {
		t.Fatalf("List with an unreadable record: %v", err)
	}
}
