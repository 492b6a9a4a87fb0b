package scalesim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type clientKV = *clientv3.Client

func withPrefixCount() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}

// stats collects what the nodes observe; safe for concurrent use.
type stats struct {
	readErrs, writeErrs atomic.Int64
	sessionsLost        atomic.Int64 // owner sessions fenced (lease not renewed in time)
	copyReads           atomic.Int64 // views read wholly from the node's copy (viewcache)
	leaseLookups        atomic.Int64 // LeaseTimeToLive requests (lapses of unpublished sessions)

	mu      sync.Mutex
	views   []time.Duration
	holder  map[string]string // volume -> node that acquired its key last
	killed  map[string]bool
	lapsed  map[string]bool // volumes whose holder's owner session fenced since it acquired them
	doubled map[string]bool // volumes acquired while the previous holder ran them
}

func newStats() *stats {
	return &stats{holder: map[string]string{}, killed: map[string]bool{}, lapsed: map[string]bool{}, doubled: map[string]bool{}}
}

func (s *stats) read(d time.Duration, err error) {
	if err != nil {
		s.readErrs.Add(1)
		return
	}
	s.mu.Lock()
	s.views = append(s.views, d)
	s.mu.Unlock()
}

func (s *stats) write(err error) {
	if err != nil {
		s.writeErrs.Add(1)
	}
}

// acquired records that node holds volume's key now. A previous holder
// that was neither killed nor fenced (its owner session, on which the key
// was, still live: nobody resigns in the simulation) still ran it: two
// owners.
func (s *stats) acquired(volume, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.holder[volume]; ok && prev != node && !s.killed[prev] && !s.lapsed[volume] {
		s.doubled[volume] = true
	}
	s.holder[volume] = node
	delete(s.lapsed, volume)
}

// fenced records that node's owner session fenced: the keys it holds
// now (on that session: a node holds keys on one session at a time)
// lapse with it.
func (s *stats) fenced(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for volume, holder := range s.holder {
		if holder == node {
			s.lapsed[volume] = true
		}
	}
}

func (s *stats) twoOwners() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.doubled)
}

// reset starts a new window of view latencies.
func (s *stats) reset() {
	s.mu.Lock()
	s.views = nil
	s.mu.Unlock()
	s.copyReads.Store(0)
}

// viewQuantiles returns the count, p50 and p99 (seconds) of the window.
func (s *stats) viewQuantiles() (int64, float64, float64) {
	s.mu.Lock()
	v := slices.Clone(s.views)
	s.mu.Unlock()
	if len(v) == 0 {
		return 0, 0, 0
	}
	slices.Sort(v)
	q := func(p float64) float64 { return v[min(len(v)-1, int(p*float64(len(v))))].Seconds() }
	return int64(len(v)), q(0.50), q(0.99)
}

// ownedBy returns the volumes whose key one of names holds, and marks
// them killed.
func (s *stats) ownedBy(names []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for v, n := range s.holder {
		if slices.Contains(names, n) {
			out = append(out, v)
		}
	}
	for _, n := range names {
		s.killed[n] = true
	}
	return out
}

// busiestOwner is the node holding the most keys.
func (s *stats) busiestOwner() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	count := map[string]int{}
	best := ""
	for _, n := range s.holder {
		count[n]++
		if count[n] > count[best] || (count[n] == count[best] && n < best) {
			best = n
		}
	}
	return best
}

// waitOwned waits until every volume of want has a holder not in not.
func (s *stats) waitOwned(ctx context.Context, want, all []string, timeout time.Duration, not ...string) error {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		left := 0
		for _, v := range want {
			if h, ok := s.holder[v]; !ok || slices.Contains(not, h) {
				left++
			}
		}
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scalesim: %d of %d volumes (of %d) without an owner after %s", left, len(want), len(all), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
