package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine"
)

// buckets builds cumulative histogram counts from per-bucket counts.
func buckets(per ...uint64) (b [len(engine.LatencyBuckets)]uint64) {
	var sum uint64
	for i := range b {
		if i < len(per) {
			sum += per[i]
		}
		b[i] = sum
	}
	return b
}

func TestQuantileBound(t *testing.T) {
	cases := []struct {
		s    engine.OpStats
		want string
	}{
		{engine.OpStats{}, "-"},
		// 100 requests, all <= 100µs.
		{engine.OpStats{Requests: 100, Buckets: buckets(100)}, "<= 100µs"},
		// 98 fast, 2 at <= 1ms: the 99th is in the 1ms bucket.
		{engine.OpStats{Requests: 100, Buckets: buckets(98, 0, 0, 2)}, "<= 1.00ms"},
		// 99 fast, 1 slow: the 99th is still fast.
		{engine.OpStats{Requests: 100, Buckets: buckets(99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)}, "<= 100µs"},
		// 5 of 10 beyond the last bucket.
		{engine.OpStats{Requests: 10, Buckets: buckets(5)}, "> 1.00s"},
	}
	for _, c := range cases {
		if got := quantileBound(c.s, 0.99); got != c.want {
			t.Errorf("quantileBound(%d req, %v) = %q, want %q", c.s.Requests, c.s.Buckets, got, c.want)
		}
	}
}

func TestWriteIOStats(t *testing.T) {
	s := &engine.IOStats{
		Read:         engine.OpStats{Requests: 4, Bytes: 4 << 20, Seconds: 0.002, Buckets: buckets(0, 0, 4)},
		Write:        engine.OpStats{Requests: 2, Bytes: 128 << 10, Errors: 1, Seconds: 0.03, Buckets: buckets(0, 0, 0, 0, 0, 0, 0, 2)},
		MemberErrors: 3,
	}
	var buf bytes.Buffer
	if err := writeIOStats(&buf, s); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want header, read, write, flush, member errors:\n%s", len(lines), buf.String())
	}
	for i, want := range [][]string{
		{"read", "4", "4.0 MiB", "0", "500µs", "<= 500µs"},
		{"write", "2", "128.0 KiB", "1", "15.00ms", "<= 25.00ms"},
		{"flush", "0", "0 B", "0", "-", "-"},
	} {
		row := strings.Join(strings.Fields(lines[i+1]), " ")
		if !strings.Contains(row, strings.Join(want, " ")) {
			t.Errorf("row %d = %q, want %q", i+1, row, strings.Join(want, " "))
		}
	}
	if !strings.HasPrefix(lines[4], "member I/O errors: 3") {
		t.Errorf("last line %q", lines[4])
	}
	s.PlannedWrites = engine.PlanStats{Planned: 5, BitNotDurable: 2, StripeBusy: 1}
	buf.Reset()
	if err := writeIOStats(&buf, s); err != nil {
		t.Fatal(err)
	}
	want := "writes planned on the ublk queue thread: 5 of 8 (declined: across stripes 0, write-intent bit not set 2, stripe busy 1,"
	if lines := strings.Split(buf.String(), "\n"); !strings.HasPrefix(lines[4], want) {
		t.Errorf("planned writes line %q, want it to start with %q", lines[4], want)
	}
}
