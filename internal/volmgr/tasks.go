package volmgr

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
)

// tasks runs an engine's one background task (a rebuild or a scrub) at a
// time and keeps the result of the last one. Its methods are safe for
// concurrent use.
//
// A rebuild can be superseded: a member re-added while a rebuild runs
// stops it (the engine keeps each target's checkpoint) so that the next
// rebuild covers the running targets and the newcomer in one pass over
// the rows. A superseded rebuild leaves no result of its own.
type tasks struct {
	volume string // for messages
	log    *slog.Logger

	mu         sync.Mutex
	kind       string // "rebuild" or "scrub" while one runs
	rate       int64  // the running rebuild's rate
	cancel     context.CancelFunc
	done       chan struct{}
	superseded bool
	last       *api.TaskResult
}

// current returns the running task's kind ("" when none) and the last
// task's result.
func (t *tasks) current() (string, *api.TaskResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.kind, t.last
}

// start runs f in the background as a task of kind, or fails with ErrBusy
// while another task runs.
func (t *tasks) start(kind string, rate int64, f func(context.Context) (*engine.ScrubReport, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kind != "" {
		return fmt.Errorf("volume %s: %s: %w (%s)", t.volume, kind, ErrBusy, t.kind)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.kind, t.rate, t.cancel, t.done, t.superseded = kind, rate, cancel, make(chan struct{}), false
	done := t.done
	go func() {
		defer close(done)
		t0 := time.Now()
		rep, err := f(ctx)
		res := &api.TaskResult{Kind: kind, Scrub: rep, Finished: time.Now().UTC(), Seconds: time.Since(t0).Seconds()}
		if err != nil {
			res.Error = err.Error()
		}
		t.mu.Lock()
		superseded := t.superseded
		t.kind, t.cancel = "", nil
		if !superseded {
			t.last = res
		}
		t.mu.Unlock()
		cancel()
		switch {
		case superseded:
			t.log.Info("rebuild stopped to take in another returning member; the next one covers both", "volume", t.volume, "seconds", res.Seconds)
		case err != nil:
			t.log.Error("background task failed", "volume", t.volume, "task", kind, "err", err)
		default:
			t.log.Info("background task done", "volume", t.volume, "task", kind, "seconds", res.Seconds)
		}
	}()
	return nil
}

// makeRoom prepares for a member change (what: "re-add", "replace"). With
// no task running it returns rate. A running rebuild is stopped (its
// targets keep their checkpoints) and stopped is true; the rate returned
// is for the rebuild that takes its place: rate, or the stopped one's when
// rate is 0. A running scrub makes it fail with ErrBusy.
func (t *tasks) makeRoom(what string, rate int64) (_ int64, stopped bool, _ error) {
	t.mu.Lock()
	kind, cancel, done := t.kind, t.cancel, t.done
	switch kind {
	case "":
		t.mu.Unlock()
		return rate, false, nil
	case "rebuild":
		if rate == 0 {
			rate = t.rate
		}
		t.superseded = true
		t.mu.Unlock()
		cancel()
		<-done
		return rate, true, nil
	}
	t.mu.Unlock()
	return 0, false, fmt.Errorf("volume %s: %s: %w (%s)", t.volume, what, ErrBusy, kind)
}

// stop cancels the running task, if any, and waits for it.
func (t *tasks) stop() {
	t.mu.Lock()
	cancel, done := t.cancel, t.done
	t.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
