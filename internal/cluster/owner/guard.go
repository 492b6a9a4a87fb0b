package owner

import "time"

// Defaults of the owner lease (see the package documentation for the
// arithmetic).
const (
	// DefaultTTL is the owner lease's TTL: failover takes at least this
	// long after an owner dies.
	DefaultTTL = 6 * time.Second
	// DefaultStopBudget is the part of the margin that covers the time
	// from the self-fence deadline until the owner's engines are frozen.
	DefaultStopBudget = 900 * time.Millisecond
	// rateSkewDivisor: the margin allows the etcd leader's clock to run
	// 1/rateSkewDivisor (1%) fast against the owner's over one TTL.
	rateSkewDivisor = 100
)

// KeepAliveInterval is how often the owner sends a keepalive for a lease
// of ttl: TTL/3, as etcd's own client does, so that two keepalives can be
// lost before the self-fence.
func KeepAliveInterval(ttl time.Duration) time.Duration { return ttl / 3 }

// Margin is how long before the earliest possible server-side expiry
// (keepalive sent + ttl) the owner self-fences: the clock rate skew over
// one TTL plus stop, the time the owner needs to freeze its engines.
func Margin(ttl, stop time.Duration) time.Duration { return ttl/rateSkewDivisor + stop }

// Guard is the pure self-fence clock of one lease: it turns "keepalive sent
// at t, answered with TTL" events into the deadline after which the owner
// must not acknowledge writes. It reads no clock; every time is passed in.
// A Guard is not safe for concurrent use (Session serialises it).
type Guard struct {
	margin   time.Duration
	deadline time.Time
	fenced   bool
}

// NewGuard starts the clock of a lease granted by a request sent at sent
// with the granted ttl.
func NewGuard(sent time.Time, ttl, margin time.Duration) Guard {
	g := Guard{margin: margin}
	g.Renewed(sent, ttl)
	return g
}

// Renewed records that a keepalive sent at sent was answered with the
// lease's ttl: the lease lives at the server at least until sent + ttl.
// The deadline only moves later (answers may arrive out of order), and a
// fenced guard stays fenced. A ttl <= 0 (the server no longer knows the
// lease) is Lost.
func (g *Guard) Renewed(sent time.Time, ttl time.Duration) {
	if ttl <= 0 {
		g.Lost()
		return
	}
	if d := sent.Add(ttl - g.margin); d.After(g.deadline) && !g.fenced {
		g.deadline = d
	}
}

// Lost records that the lease is gone (revoked, expired, unknown to the
// server): the owner fences at once.
func (g *Guard) Lost() { g.fenced = true }

// Deadline is the self-fence deadline: last answered keepalive's send time
// + TTL - margin.
func (g *Guard) Deadline() time.Time { return g.deadline }

// Fenced reports whether the owner must have stopped acknowledging writes
// at now; once true it stays true.
func (g *Guard) Fenced(now time.Time) bool {
	if !g.fenced && !now.Before(g.deadline) {
		g.fenced = true
	}
	return g.fenced
}
