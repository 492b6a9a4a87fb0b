package owner

import (
	"testing"
	"time"
)

// The guard's deadline counts from the send time of the last answered
// keepalive, never from the answer's arrival, only moves later, and a
// fence is final.
func TestGuard(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ttl := 6 * time.Second
	margin := Margin(ttl, DefaultStopBudget)
	if margin != 960*time.Millisecond {
		t.Fatalf("default margin for 6 s: %v, want 960ms (TTL/100 + 900ms)", margin)
	}
	if KeepAliveInterval(ttl) != 2*time.Second {
		t.Fatalf("keepalive interval %v", KeepAliveInterval(ttl))
	}
	g := NewGuard(at(0), ttl, margin)
	if want := at(5040); !g.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want sent + TTL - margin = %v", g.Deadline(), want)
	}
	// A keepalive sent at 2 s and answered at 4.5 s (a slow etcd): the
	// deadline counts from 2 s.
	g.Renewed(at(2000), ttl)
	if want := at(7040); !g.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v (from the send time)", g.Deadline(), want)
	}
	// An older keepalive answered late does not move it back.
	g.Renewed(at(1000), ttl)
	if want := at(7040); !g.Deadline().Equal(want) {
		t.Fatalf("deadline moved back to %v", g.Deadline())
	}
	if g.Fenced(at(7039)) {
		t.Fatal("fenced before the deadline")
	}
	if !g.Fenced(at(7040)) {
		t.Fatal("not fenced at the deadline")
	}
	// Final: a later answer does not lift it.
	g.Renewed(at(7000), ttl)
	if !g.Fenced(at(7041)) || !g.Deadline().Equal(at(7040)) {
		t.Fatalf("a fence was lifted: deadline %v", g.Deadline())
	}

	// The server's answer is the TTL used: a lease granted longer than
	// asked (the server's minimum) moves the deadline accordingly; a TTL
	// of 0 or less (the lease is unknown) fences at once.
	g = NewGuard(at(0), 2*time.Second, Margin(2*time.Second, 300*time.Millisecond))
	if want := at(1680); !g.Deadline().Equal(want) {
		t.Fatalf("2 s lease: deadline %v, want %v", g.Deadline(), want)
	}
	g.Renewed(at(500), -1)
	if !g.Fenced(at(501)) {
		t.Fatal("a lease the server does not know did not fence")
	}
	g = NewGuard(at(0), ttl, margin)
	g.Lost()
	if !g.Fenced(at(1)) {
		t.Fatal("Lost did not fence")
	}
}
