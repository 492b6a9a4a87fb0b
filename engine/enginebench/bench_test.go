package enginebench

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// The benchmark runs end to end on a tiny configuration and reports every
// key the issue names. No throughput is asserted: unit tests have no
// wall-clock thresholds.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	res, err := Run(context.Background(), Config{
		Dir: t.TempDir(), K: 3, M: 2, Groups: 2, ChunkSize: 16 << 10, MemberSize: 8 << 20,
		Duration: 20 * time.Millisecond, Rounds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"seq_write_ratio", "seq_read_ratio", "degraded_read_ratio", "rand_read_ratio",
		"rand_write_ratio", "rebuild_ratio", "domain_lost_read_ratio", "rand_write_rmw_ratio"} {
		if v, ok := m[k]; !ok || v <= 0 {
			t.Errorf("%s = %v (present %v)", k, v, ok)
		}
	}
}
