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
		Read:         engine.OpStats{Requests: 10, Bytes: 40960, Errors: 1, Seconds: 0.5},
		Write:        engine.OpStats{Requests: 4, Bytes: 8192, Seconds: 2},
		Flush:        engine.OpStats{Requests: 2, Seconds: 0.25},
		MemberErrors: 3,
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

// The running or last rebuild's bytes are exported per volume: a partial
// resync of a returning member shows what it wrote against what it had to
// write and the member's size.
func TestMetricsRebuildBytes(t *testing.T) {
	vols := []api.Volume{
		{Name: "v0", State: "optimal", Rebuild: &api.RebuildBytes{Partial: true, Regions: 3, CoverBytes: 3 << 20, Bytes: 3 << 20, MemberBytes: 31 << 20}},
		{Name: "v1", State: "optimal"}, // never rebuilt since its engine started
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: testDaemon(t), list: func() []api.Volume { return vols }})
	want := `
# HELP fabraid_volume_rebuild_bytes Member data bytes of the running or last rebuild since the engine started, summed over its targets. partial true: a resync of returning members (only the write-intent bitmap's regions). what: written (so far), to_write (when it started; bitmap regions times region size for a resync), member (one member's data area).
# TYPE fabraid_volume_rebuild_bytes gauge
fabraid_volume_rebuild_bytes{partial="true",volume="v0",what="member"} 3.2505856e+07
fabraid_volume_rebuild_bytes{partial="true",volume="v0",what="to_write"} 3.145728e+06
fabraid_volume_rebuild_bytes{partial="true",volume="v0",what="written"} 3.145728e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fabraid_volume_rebuild_bytes"); err != nil {
		t.Error(err)
	}
}
