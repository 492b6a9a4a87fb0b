package daemon

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
)

func TestMetricsIO(t *testing.T) {
	io := &engine.IOStats{
		Read:          engine.OpStats{Requests: 10, Bytes: 40960, Errors: 1, Seconds: 0.5},
		Write:         engine.OpStats{Requests: 4, Bytes: 8192, Seconds: 2},
		Flush:         engine.OpStats{Requests: 2, Seconds: 0.25},
		MemberErrors:  3,
		PlannedWrites: engine.PlanStats{Planned: 3, BitNotDurable: 1},
	}
	for i := range engine.LatencyBuckets {
		io.Read.Buckets[i] = uint64(min(i+1, 9)) // cumulative; one request above 1s
		io.Write.Buckets[i] = 4
		io.Flush.Buckets[i] = 2
	}
	vols := []api.Volume{
		{Name: "v0", UUID: "u0", NQN: "nqn0", State: "optimal", Size: 1 << 20, IO: io},
		{Name: "v1", UUID: "u1", NQN: "nqn1", State: "stopped"}, // no engine: no I/O metrics
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: testDaemon(t), list: func() []api.Volume { return vols }})
	want := `
# HELP fabraid_volume_io_errors_total Requests that returned an error to the consumer.
# TYPE fabraid_volume_io_errors_total counter
fabraid_volume_io_errors_total{op="flush",volume="v0"} 0
fabraid_volume_io_errors_total{op="read",volume="v0"} 1
fabraid_volume_io_errors_total{op="write",volume="v0"} 0
# HELP fabraid_volume_member_io_errors_total Member I/O errors (each fails its member; the request may still succeed).
# TYPE fabraid_volume_member_io_errors_total counter
fabraid_volume_member_io_errors_total{volume="v0"} 3
# HELP fabraid_volume_read_bytes_total Bytes read by successful requests.
# TYPE fabraid_volume_read_bytes_total counter
fabraid_volume_read_bytes_total{volume="v0"} 40960
# HELP fabraid_volume_requests_total Requests completed by the engine (op: read, write, flush), successfully or not.
# TYPE fabraid_volume_requests_total counter
fabraid_volume_requests_total{op="flush",volume="v0"} 2
fabraid_volume_requests_total{op="read",volume="v0"} 10
fabraid_volume_requests_total{op="write",volume="v0"} 4
# HELP fabraid_volume_write_bytes_total Bytes written by successful requests (write zeroes included).
# TYPE fabraid_volume_write_bytes_total counter
fabraid_volume_write_bytes_total{volume="v0"} 8192
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fabraid_volume_io_errors_total", "fabraid_volume_member_io_errors_total", "fabraid_volume_read_bytes_total",
		"fabraid_volume_requests_total", "fabraid_volume_write_bytes_total"); err != nil {
		t.Error(err)
	}
	wantPlanned := `
# HELP fabraid_volume_planned_writes_total Writes offered to the ublk queue thread's planned path, by outcome: planned, or the reason it was declined (not_one_stripe, bit_not_durable, stripe_busy, resync_pending, unplannable, gate_shut), which sends the write to a worker.
# TYPE fabraid_volume_planned_writes_total counter
fabraid_volume_planned_writes_total{outcome="bit_not_durable",volume="v0"} 1
fabraid_volume_planned_writes_total{outcome="gate_shut",volume="v0"} 0
fabraid_volume_planned_writes_total{outcome="not_one_stripe",volume="v0"} 0
fabraid_volume_planned_writes_total{outcome="planned",volume="v0"} 3
fabraid_volume_planned_writes_total{outcome="resync_pending",volume="v0"} 0
fabraid_volume_planned_writes_total{outcome="stripe_busy",volume="v0"} 0
fabraid_volume_planned_writes_total{outcome="unplannable",volume="v0"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantPlanned), "fabraid_volume_planned_writes_total"); err != nil {
		t.Error(err)
	}
	wantHist := `
# HELP fabraid_volume_request_duration_seconds Request latency in the engine.
# TYPE fabraid_volume_request_duration_seconds histogram
` + histLines("flush", "0.25", 2, []uint64{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}) +
		histLines("read", "0.5", 10, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9}) +
		histLines("write", "2", 4, []uint64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantHist), "fabraid_volume_request_duration_seconds"); err != nil {
		t.Error(err)
	}
}

func histLines(op, sum string, count uint64, buckets []uint64) string {
	les := []string{"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "1"}
	var b strings.Builder
	for i, le := range les {
		b.WriteString(`fabraid_volume_request_duration_seconds_bucket{op="` + op + `",volume="v0",le="` + le + `"} ` + strconv.FormatUint(buckets[i], 10) + "\n")
	}
	b.WriteString(`fabraid_volume_request_duration_seconds_bucket{op="` + op + `",volume="v0",le="+Inf"} ` + strconv.FormatUint(count, 10) + "\n")
	b.WriteString(`fabraid_volume_request_duration_seconds_sum{op="` + op + `",volume="v0"} ` + sum + "\n")
	b.WriteString(`fabraid_volume_request_duration_seconds_count{op="` + op + `",volume="v0"} ` + strconv.FormatUint(count, 10) + "\n")
	return b.String()
}

func TestMetricsWriteHole(t *testing.T) {
	vols := []api.Volume{
		{Name: "v0", State: "degraded", WriteHoleStripes: 7},
		{Name: "v1", State: "optimal"},
		{Name: "v2", State: "stopped"}, // engine not answering: nothing known
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: testDaemon(t), list: func() []api.Volume { return vols }})
	want := `
# HELP fabraid_volume_write_hole_stripes Stripes whose lost chunks may read back wrong after the last unclean stop (a member lost at the crash itself); normally 0.
# TYPE fabraid_volume_write_hole_stripes gauge
fabraid_volume_write_hole_stripes{volume="v0"} 7
fabraid_volume_write_hole_stripes{volume="v1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fabraid_volume_write_hole_stripes"); err != nil {
		t.Error(err)
	}
}

// The running or last rebuild's bytes are exported per volume, one
// quantity per metric: a partial resync of a returning member shows what it
// wrote against what it had to write and the member's size; a full rebuild
// that has just started, of two targets, has twice a member to write.
func TestMetricsRebuildBytes(t *testing.T) {
	vols := []api.Volume{
		{Name: "v0", State: "optimal", Rebuild: &api.RebuildBytes{Partial: true, Regions: 3, CoverBytes: 3 << 20, Bytes: 2 << 20, MemberBytes: 31 << 20}},
		{Name: "v1", State: "optimal"}, // never rebuilt since its engine started
		{Name: "v2", State: "rebuilding", Rebuild: &api.RebuildBytes{Running: true, CoverBytes: 2 * 32 << 20, MemberBytes: 32 << 20}}, // two replacements
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: testDaemon(t), list: func() []api.Volume { return vols }})
	want := `
# HELP fabraid_volume_rebuild_written_bytes Member data bytes the running or last rebuild since the engine started has written so far, summed over its targets.
# TYPE fabraid_volume_rebuild_written_bytes gauge
fabraid_volume_rebuild_written_bytes{volume="v0"} 2.097152e+06
fabraid_volume_rebuild_written_bytes{volume="v2"} 0
# HELP fabraid_volume_rebuild_to_write_bytes Member data bytes the running or last rebuild had to write when it started, summed over its targets (a resync: its bitmap regions times the region size).
# TYPE fabraid_volume_rebuild_to_write_bytes gauge
fabraid_volume_rebuild_to_write_bytes{volume="v0"} 3.145728e+06
fabraid_volume_rebuild_to_write_bytes{volume="v2"} 6.7108864e+07
# HELP fabraid_volume_rebuild_member_bytes The data area of one member of the volume (the size a full rebuild of one target writes).
# TYPE fabraid_volume_rebuild_member_bytes gauge
fabraid_volume_rebuild_member_bytes{volume="v0"} 3.2505856e+07
fabraid_volume_rebuild_member_bytes{volume="v2"} 3.3554432e+07
# HELP fabraid_volume_rebuild_partial 1 when the running or last rebuild is a resync of returning members (only the write-intent bitmap's regions), 0 for a full rebuild.
# TYPE fabraid_volume_rebuild_partial gauge
fabraid_volume_rebuild_partial{volume="v0"} 1
fabraid_volume_rebuild_partial{volume="v2"} 0
# HELP fabraid_volume_rebuild_running 1 while the rebuild the fabraid_volume_rebuild_* metrics describe runs, 0 when they describe the last one, which has ended.
# TYPE fabraid_volume_rebuild_running gauge
fabraid_volume_rebuild_running{volume="v0"} 0
fabraid_volume_rebuild_running{volume="v2"} 1
`
	names := []string{"fabraid_volume_rebuild_written_bytes", "fabraid_volume_rebuild_to_write_bytes", "fabraid_volume_rebuild_member_bytes",
		"fabraid_volume_rebuild_partial", "fabraid_volume_rebuild_running"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// A volume waiting at boot (members missing, or the cluster owner check)
// is state waiting: 1 for it, 0 for the other states.
func TestMetricsStateWaiting(t *testing.T) {
	vols := []api.Volume{{Name: "v0", State: "waiting", Error: "volume v0: waiting for 1 of 4 members (slot 3, member ...); starts degraded in 3s"}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: testDaemon(t), list: func() []api.Volume { return vols }})
	want := `
# HELP fabraid_volume_state 1 for the volume's current state, 0 for the others: optimal, degraded, rebuilding, failed, stopped (no engine runs or answers), waiting (held back by the start gate: members missing at boot, fewer than k in sync, or the cluster owner check). volume show says why.
# TYPE fabraid_volume_state gauge
fabraid_volume_state{state="degraded",volume="v0"} 0
fabraid_volume_state{state="failed",volume="v0"} 0
fabraid_volume_state{state="optimal",volume="v0"} 0
fabraid_volume_state{state="rebuilding",volume="v0"} 0
fabraid_volume_state{state="stopped",volume="v0"} 0
fabraid_volume_state{state="waiting",volume="v0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fabraid_volume_state"); err != nil {
		t.Error(err)
	}
}
