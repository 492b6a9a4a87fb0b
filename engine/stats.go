package engine

import (
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds, in seconds, of the request latency
// histogram in OpStats.Buckets.
var LatencyBuckets = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

var latencyBounds = func() (b [len(LatencyBuckets)]int64) {
	for i, s := range LatencyBuckets {
		b[i] = int64(s * 1e9)
	}
	return b
}()

// OpStats counts the requests of one kind (read, write or flush) since the
// volume was assembled.
type OpStats struct {
	Requests uint64  // requests completed, successfully or not
	Bytes    uint64  // bytes transferred by successful requests
	Errors   uint64  // requests that returned an error to the caller
	Seconds  float64 // sum of the latencies of Requests
	// Buckets[i] counts requests with latency <= LatencyBuckets[i]
	// (cumulative, as Prometheus wants it).
	Buckets [len(LatencyBuckets)]uint64
}

// IOStats are a volume's I/O counters; see Volume.IOStats.
type IOStats struct {
	Read, Write, Flush OpStats
	// MemberErrors counts member I/O errors (each fails its member; the
	// request may still succeed).
	MemberErrors uint64
	// PlannedWrites counts the writes offered to PlanWrite.
	PlannedWrites PlanStats `json:",omitzero"`
}

// PlanStats counts the requests offered to a Plan method (a ublk queue
// thread carries a planned request as rounds on its own ring, and hands a
// declined one to the general path) by outcome: planned, or declined for
// the first reason found.
type PlanStats struct {
	Planned uint64
	// NotOneStripe: the request spans stripes. BitNotDurable: its region's
	// write-intent bit is not set yet. StripeBusy: another request holds
	// the stripe. ResyncPending: the background resync has not reached
	// the row. Unplannable: no plan now (too many members lost, a failure
	// not yet handled) or the volume is stopping. GateShut: the volume is
	// frozen.
	NotOneStripe, BitNotDurable, StripeBusy, ResyncPending, Unplannable, GateShut uint64
}

// planCounters is the lock-free form of PlanStats.
type planCounters struct {
	planned, notOneStripe, bitNotDurable, stripeBusy, resyncPending, unplannable, gateShut atomic.Uint64
}

func (c *planCounters) snapshot() PlanStats {
	return PlanStats{
		Planned: c.planned.Load(), NotOneStripe: c.notOneStripe.Load(), BitNotDurable: c.bitNotDurable.Load(),
		StripeBusy: c.stripeBusy.Load(), ResyncPending: c.resyncPending.Load(), Unplannable: c.unplannable.Load(),
		GateShut: c.gateShut.Load(),
	}
}

// opCounters is the lock-free form of OpStats, padded so that counters of
// different request kinds do not share a cache line.
type opCounters struct {
	requests, bytes, errors, nanos atomic.Uint64
	buckets                        [len(LatencyBuckets)]atomic.Uint64 // not cumulative
	_                              [64]byte
}

type ioCounters struct {
	read, write, flush opCounters
	memberErrors       atomic.Uint64
	plannedWrites      planCounters
}

// done records a request that started at t0 and moved n bytes.
func (c *opCounters) done(t0 time.Time, n int64, err error) {
	d := int64(time.Since(t0))
	c.requests.Add(1)
	c.nanos.Add(uint64(d))
	if err != nil {
		c.errors.Add(1)
	} else {
		c.bytes.Add(uint64(n))
	}
	for i, b := range latencyBounds {
		if d <= b {
			c.buckets[i].Add(1)
			break
		}
	}
}

func (c *opCounters) snapshot() OpStats {
	s := OpStats{Requests: c.requests.Load(), Bytes: c.bytes.Load(), Errors: c.errors.Load(), Seconds: float64(c.nanos.Load()) / 1e9}
	var sum uint64
	for i := range c.buckets {
		sum += c.buckets[i].Load()
		s.Buckets[i] = sum
	}
	return s
}

// IOStats returns the volume's request counters since it was assembled:
// per request kind the count, bytes, errors returned to the caller and the
// latency (sum and histogram), plus the member I/O errors. Counting is
// lock-free; the fields are read one by one, so a snapshot taken under
// load may be off by the requests completing meanwhile.
func (v *Volume) IOStats() IOStats {
	return IOStats{
		Read: v.stats.read.snapshot(), Write: v.stats.write.snapshot(), Flush: v.stats.flush.snapshot(),
		MemberErrors: v.stats.memberErrors.Load(), PlannedWrites: v.stats.plannedWrites.snapshot(),
	}
}
