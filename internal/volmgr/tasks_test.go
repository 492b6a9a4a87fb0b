package volmgr

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/fabraid/fabraid/engine"
)

// blockingTask runs until its context is cancelled and reports that it
// ran through started.
func blockingTask(started chan<- struct{}) func(context.Context) (*engine.ScrubReport, error) {
	return func(ctx context.Context) (*engine.ScrubReport, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
}

// A member change while a rebuild runs stops that rebuild and hands its
// rate on; the stopped rebuild leaves no result (the next one covers its
// targets). A scrub is not stopped: the change fails with ErrBusy.
func TestTasksMakeRoomStopsRebuild(t *testing.T) {
	ts := &tasks{volume: "v", log: slog.New(slog.DiscardHandler)}
	if rate, stopped, err := ts.makeRoom("re-add", 7); rate != 7 || stopped || err != nil {
		t.Fatalf("idle: rate %d stopped %v err %v", rate, stopped, err)
	}
	done := func(context.Context) (*engine.ScrubReport, error) { return nil, nil }
	if err := ts.start("rebuild", 0, done); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	_, before := ts.current()
	if before == nil || before.Kind != "rebuild" {
		t.Fatalf("last task after a finished rebuild: %+v", before)
	}

	started := make(chan struct{})
	if err := ts.start("rebuild", 5<<20, blockingTask(started)); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := ts.start("rebuild", 0, done); !errors.Is(err, ErrBusy) {
		t.Fatalf("second rebuild while one runs: %v, want ErrBusy", err)
	}
	rate, stopped, err := ts.makeRoom("re-add", 0)
	if err != nil || !stopped || rate != 5<<20 {
		t.Fatalf("re-add during a rebuild: rate %d stopped %v err %v; want the rebuild stopped and its rate", rate, stopped, err)
	}
	if kind, last := ts.current(); kind != "" || last != before {
		t.Fatalf("after the stop: running %q, last %+v; want none and the earlier result kept", kind, last)
	}
	if rate, _, _ := func() (int64, bool, error) {
		if err := ts.start("rebuild", 1, blockingTask(started)); err != nil {
			t.Fatal(err)
		}
		<-started
		return ts.makeRoom("replace", 9)
	}(); rate != 9 {
		t.Fatalf("replace with its own rate during a rebuild: rate %d, want 9", rate)
	}

	if err := ts.start("scrub", 0, blockingTask(started)); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, stopped, err := ts.makeRoom("re-add", 0); !errors.Is(err, ErrBusy) || stopped {
		t.Fatalf("re-add during a scrub: stopped %v err %v, want ErrBusy", stopped, err)
	}
	ts.stop()
	if _, last := ts.current(); last == nil || last.Kind != "scrub" || last.Error == "" {
		t.Fatalf("a cancelled scrub's result: %+v", last)
	}
}
