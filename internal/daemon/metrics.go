package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
)

var (
	descInfo     = prometheus.NewDesc("fabraid_volume_info", "A volume and its consumer device (value 1).", []string{"volume", "uuid", "device", "nqn"}, nil)
	descState    = prometheus.NewDesc("fabraid_volume_state", "1 for the volume's current state, 0 for the others: optimal, degraded, rebuilding, failed, stopped (no engine runs or answers), waiting (held back by the start gate: members missing at boot, fewer than k in sync, or the cluster owner check). volume show says why.", []string{"volume", "state"}, nil)
	descSize     = prometheus.NewDesc("fabraid_volume_size_bytes", "Volume size.", []string{"volume"}, nil)
	descFailed   = prometheus.NewDesc("fabraid_volume_failed_members", "Members marked failed.", []string{"volume"}, nil)
	descStale    = prometheus.NewDesc("fabraid_volume_stale_members", "Members being rebuilt or resynced.", []string{"volume"}, nil)
	descProgress = prometheus.NewDesc("fabraid_volume_task_progress_ratio", "Progress of the running rebuild, resync or scrub (0..1).", []string{"volume", "kind"}, nil)
	descScrub    = prometheus.NewDesc("fabraid_volume_scrub_mismatches", "Parity mismatches found by the last scrub.", []string{"volume"}, nil)
	descHole     = prometheus.NewDesc("fabraid_volume_write_hole_stripes", "Stripes whose lost chunks may read back wrong after the last unclean stop (a member lost at the crash itself); normally 0.", []string{"volume"}, nil)
	// The running or last rebuild since the engine started (api.RebuildBytes),
	// one quantity per metric: written / to_write is its progress in bytes,
	// written / member the share of a member it copied.
	descRebuildWritten = prometheus.NewDesc("fabraid_volume_rebuild_written_bytes", "Member data bytes the running or last rebuild since the engine started has written so far, summed over its targets.", []string{"volume"}, nil)
	descRebuildToWrite = prometheus.NewDesc("fabraid_volume_rebuild_to_write_bytes", "Member data bytes the running or last rebuild had to write when it started, summed over its targets (a resync: its bitmap regions times the region size).", []string{"volume"}, nil)
	descRebuildMember  = prometheus.NewDesc("fabraid_volume_rebuild_member_bytes", "The data area of one member of the volume (the size a full rebuild of one target writes).", []string{"volume"}, nil)
	descRebuildPartial = prometheus.NewDesc("fabraid_volume_rebuild_partial", "1 when the running or last rebuild is a resync of returning members (only the write-intent bitmap's regions), 0 for a full rebuild.", []string{"volume"}, nil)
	descRebuildRunning = prometheus.NewDesc("fabraid_volume_rebuild_running", "1 while the rebuild the fabraid_volume_rebuild_* metrics describe runs, 0 when they describe the last one, which has ended.", []string{"volume"}, nil)
	descErrors         = prometheus.NewDesc("fabraid_reconcile_errors_total", "Reconcile runs that ended with an error.", nil, nil)

	// I/O counters of the volume's engine, reset when its process restarts.
	descRequests     = prometheus.NewDesc("fabraid_volume_requests_total", "Requests completed by the engine (op: read, write, flush), successfully or not.", []string{"volume", "op"}, nil)
	descReadBytes    = prometheus.NewDesc("fabraid_volume_read_bytes_total", "Bytes read by successful requests.", []string{"volume"}, nil)
	descWriteBytes   = prometheus.NewDesc("fabraid_volume_write_bytes_total", "Bytes written by successful requests (write zeroes included).", []string{"volume"}, nil)
	descIOErrors     = prometheus.NewDesc("fabraid_volume_io_errors_total", "Requests that returned an error to the consumer.", []string{"volume", "op"}, nil)
	descMemberErrors = prometheus.NewDesc("fabraid_volume_member_io_errors_total", "Member I/O errors (each fails its member; the request may still succeed).", []string{"volume"}, nil)
	descDuration     = prometheus.NewDesc("fabraid_volume_request_duration_seconds", "Request latency in the engine.", []string{"volume", "op"}, nil)
	descPlanned      = prometheus.NewDesc("fabraid_volume_planned_writes_total", "Writes offered to the ublk queue thread's planned path, by outcome: planned, or the reason it was declined (not_one_stripe, bit_not_durable, stripe_busy, resync_pending, unplannable, gate_shut), which sends the write to a worker.", []string{"volume", "outcome"}, nil)
)

var volumeStates = []string{"optimal", "degraded", "rebuilding", "failed", "stopped", "waiting"}

// collector reads the volume manager at every scrape.
type collector struct {
	d *Daemon
	// list returns the volumes; nil means d's volume manager (tests
	// set it).
	list func() []api.Volume
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descState, descSize, descFailed, descStale, descProgress, descScrub, descHole,
		descRebuildWritten, descRebuildToWrite, descRebuildMember, descRebuildPartial, descRebuildRunning, descErrors,
		descRequests, descReadBytes, descWriteBytes, descIOErrors, descMemberErrors, descDuration, descPlanned} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(c.d.errors.Load()))
	list := c.list
	if list == nil {
		list = c.d.mgr.List
	}
	for _, v := range list() {
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, v.Name, v.UUID, v.Device, v.NQN)
		for _, s := range volumeStates {
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, boolValue(s == v.State), v.Name, s)
		}
		ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(v.Size), v.Name)
		ch <- prometheus.MustNewConstMetric(descFailed, prometheus.GaugeValue, float64(v.Failed), v.Name)
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, float64(v.Stale), v.Name)
		if p := v.Progress; p != nil {
			ch <- prometheus.MustNewConstMetric(descProgress, prometheus.GaugeValue, p.Percent/100, v.Name, p.Kind)
		}
		if t := v.LastTask; t != nil && t.Scrub != nil {
			ch <- prometheus.MustNewConstMetric(descScrub, prometheus.GaugeValue, float64(t.Scrub.Mismatches), v.Name)
		}
		if v.State != "stopped" && v.State != "waiting" {
			ch <- prometheus.MustNewConstMetric(descHole, prometheus.GaugeValue, float64(v.WriteHoleStripes), v.Name)
		}
		if r := v.Rebuild; r != nil {
			ch <- prometheus.MustNewConstMetric(descRebuildWritten, prometheus.GaugeValue, float64(r.Bytes), v.Name)
			ch <- prometheus.MustNewConstMetric(descRebuildToWrite, prometheus.GaugeValue, float64(r.CoverBytes), v.Name)
			ch <- prometheus.MustNewConstMetric(descRebuildMember, prometheus.GaugeValue, float64(r.MemberBytes), v.Name)
			ch <- prometheus.MustNewConstMetric(descRebuildPartial, prometheus.GaugeValue, boolValue(r.Partial), v.Name)
			ch <- prometheus.MustNewConstMetric(descRebuildRunning, prometheus.GaugeValue, boolValue(r.Running), v.Name)
		}
		if v.IO != nil {
			collectIO(ch, v.Name, v.IO)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func collectIO(ch chan<- prometheus.Metric, name string, io *engine.IOStats) {
	ch <- prometheus.MustNewConstMetric(descReadBytes, prometheus.CounterValue, float64(io.Read.Bytes), name)
	ch <- prometheus.MustNewConstMetric(descWriteBytes, prometheus.CounterValue, float64(io.Write.Bytes), name)
	ch <- prometheus.MustNewConstMetric(descMemberErrors, prometheus.CounterValue, float64(io.MemberErrors), name)
	for outcome, n := range planOutcomes(io.PlannedWrites) {
		ch <- prometheus.MustNewConstMetric(descPlanned, prometheus.CounterValue, float64(n), name, outcome)
	}
	for _, o := range []struct {
		op string
		s  *engine.OpStats
	}{{"read", &io.Read}, {"write", &io.Write}, {"flush", &io.Flush}} {
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(o.s.Requests), name, o.op)
		ch <- prometheus.MustNewConstMetric(descIOErrors, prometheus.CounterValue, float64(o.s.Errors), name, o.op)
		buckets := make(map[float64]uint64, len(engine.LatencyBuckets))
		for i, b := range engine.LatencyBuckets {
			buckets[b] = o.s.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(descDuration, o.s.Requests, o.s.Seconds, buckets, name, o.op)
	}
}

// planOutcomes names the counts of s by outcome (the label values of
// fabraid_volume_planned_writes_total).
func planOutcomes(s engine.PlanStats) map[string]uint64 {
	return map[string]uint64{
		"planned": s.Planned, "not_one_stripe": s.NotOneStripe, "bit_not_durable": s.BitNotDurable,
		"stripe_busy": s.StripeBusy, "resync_pending": s.ResyncPending, "unplannable": s.Unplannable, "gate_shut": s.GateShut,
	}
}
