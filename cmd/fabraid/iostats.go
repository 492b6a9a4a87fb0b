package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fabraid/fabraid/engine"
)

// writeIOStats prints a volume's request counters as a table: per request
// kind the count, bytes, errors returned to consumers, mean latency and the
// histogram bucket that holds the 99th percentile.
func writeIOStats(w io.Writer, s *engine.IOStats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "I/O\tREQUESTS\tBYTES\tERRORS\tMEAN LATENCY\tP99 LATENCY")
	for _, op := range []struct {
		name string
		s    engine.OpStats
	}{{"read", s.Read}, {"write", s.Write}, {"flush", s.Flush}} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", op.name, op.s.Requests, humanSize(int64(op.s.Bytes)), op.s.Errors,
			meanLatency(op.s), quantileBound(op.s, 0.99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p := s.PlannedWrites; p != (engine.PlanStats{}) {
		declined := p.NotOneStripe + p.BitNotDurable + p.StripeBusy + p.ResyncPending + p.Unplannable + p.GateShut
		fmt.Fprintf(w, "writes planned on the ublk queue thread: %d of %d (declined: across stripes %d, write-intent bit not set %d, stripe busy %d, resync pending %d, unplannable %d, frozen %d)\n",
			p.Planned, p.Planned+declined, p.NotOneStripe, p.BitNotDurable, p.StripeBusy, p.ResyncPending, p.Unplannable, p.GateShut)
	}
	_, err := fmt.Fprintf(w, "member I/O errors: %d (counters since the engine started)\n", s.MemberErrors)
	return err
}

func meanLatency(s engine.OpStats) string {
	if s.Requests == 0 {
		return "-"
	}
	return fmtDuration(s.Seconds / float64(s.Requests))
}

// quantileBound returns "<= X" where X is the smallest histogram bound
// below which at least q of the requests completed, "> 1s" when they are
// beyond the last bucket, "-" without requests.
func quantileBound(s engine.OpStats, q float64) string {
	if s.Requests == 0 {
		return "-"
	}
	need := uint64(q*float64(s.Requests) + 0.999999)
	for i, b := range engine.LatencyBuckets {
		if s.Buckets[i] >= need {
			return "<= " + fmtDuration(b)
		}
	}
	return "> " + fmtDuration(engine.LatencyBuckets[len(engine.LatencyBuckets)-1])
}

func fmtDuration(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
