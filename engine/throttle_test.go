package engine

import (
	"context"
	"testing"
	"time"
)

// fakeTime is a throttle's clock: sleeps advance it and are summed.
type fakeTime struct {
	now   time.Time
	slept time.Duration
}

func (f *fakeTime) attach(t *throttle) {
	t.now = func() time.Time { return f.now }
	t.sleep = func(_ context.Context, d time.Duration) error {
		f.now = f.now.Add(d)
		f.slept += d
		return nil
	}
}

// A background job runs at Rate while the volume is idle and at
// BusyRate from a foreground request on until BusyWindow passes without
// one; idle time earns no credit. With Rate unlimited, an idle volume's
// job is not paced at all.
func TestThrottleBusyRate(t *testing.T) {
	v, _ := newTestVolume(t, Config{Name: "qos", K: 2, M: 1, ChunkSize: 4096}, 1<<20)
	defer v.Close()
	ctx := context.Background()
	const mib = 1 << 20
	run := func(th *throttle, f *fakeTime, batches int) time.Duration {
		t.Helper()
		before := f.slept
		for range batches {
			if err := th.wait(ctx, mib); err != nil {
				t.Fatal(err)
			}
		}
		// The time the batches took: sleeps before each, plus the
		// last batch's own share at its rate.
		return f.slept - before
	}
	for _, rate := range []int64{100 * mib, 0} {
		o := RebuildOptions{Rate: rate, BusyRate: 10 * mib, BusyWindow: time.Second, YieldDelay: -1}
		o.defaults()
		th := newThrottle(v, o)
		f := &fakeTime{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
		f.attach(th)
		idle := run(th, f, 11)
		want := 10 * 10 * time.Millisecond // 10 MiB at 100 MiB/s after the first batch
		if rate == 0 {
			want = 0
		}
		if d := idle - want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("rate %d, idle volume: 11 batches of 1 MiB slept %v, want %v", rate, idle, want)
		}
		v.foreground.Add(1) // a foreground request began
		busy := run(th, f, 5)
		// The first busy batch still waits out the idle pace of the one
		// before; the next four go at 10 MiB/s.
		if lo := 4 * 100 * time.Millisecond; busy < lo || busy > lo+20*time.Millisecond {
			t.Errorf("rate %d, busy volume: 5 batches slept %v, want about %v (BusyRate)", rate, busy, lo)
		}
		f.now = f.now.Add(2 * time.Second) // a quiet window later
		again := run(th, f, 11)
		if d := again - want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("rate %d, idle again after the window: slept %v, want %v (no credit for the pause, Rate again)", rate, again, want)
		}
	}
}
