package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descInfo     = prometheus.NewDesc("fabraid_volume_info", "A volume and its consumer device (value 1).", []string{"volume", "uuid", "device", "nqn"}, nil)
	descState    = prometheus.NewDesc("fabraid_volume_state", "1 for the volume's current state.", []string{"volume", "state"}, nil)
	descSize     = prometheus.NewDesc("fabraid_volume_size_bytes", "Volume size.", []string{"volume"}, nil)
	descFailed   = prometheus.NewDesc("fabraid_volume_failed_members", "Members marked failed.", []string{"volume"}, nil)
	descStale    = prometheus.NewDesc("fabraid_volume_stale_members", "Members being rebuilt or resynced.", []string{"volume"}, nil)
	descProgress = prometheus.NewDesc("fabraid_volume_task_progress_ratio", "Progress of the running rebuild, resync or scrub (0..1).", []string{"volume", "kind"}, nil)
	descScrub    = prometheus.NewDesc("fabraid_volume_scrub_mismatches", "Parity mismatches found by the last scrub.", []string{"volume"}, nil)
	descErrors   = prometheus.NewDesc("fabraid_reconcile_errors_total", "Reconcile runs that ended with an error.", nil, nil)
)

var volumeStates = []string{"optimal", "degraded", "rebuilding", "failed", "stopped"}

// collector reads the volume manager at every scrape.
type collector struct{ d *Daemon }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descState, descSize, descFailed, descStale, descProgress, descScrub, descErrors} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(c.d.errors.Load()))
	for _, v := range c.d.mgr.List() {
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, v.Name, v.UUID, v.Device, v.NQN)
		for _, s := range volumeStates {
			val := 0.0
			if s == v.State {
				val = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, val, v.Name, s)
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
	}
}
