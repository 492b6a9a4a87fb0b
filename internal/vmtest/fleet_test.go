package vmtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeFleet is a fleet of named guests whose boots are scripted: script
// is called for each boot and returns its result.
func fakeFleet(t *testing.T, names []string, script func(ctx context.Context, f *fleet, name string, boot int) *guestResult) *fleet {
	t.Helper()
	var guests []*qemuGuest
	for _, n := range names {
		guests = append(guests, &qemuGuest{name: n})
	}
	f := newFleet(context.Background(), t.TempDir(), guests, nil, nil)
	f.run = func(ctx context.Context, i, boot int) *guestResult {
		return script(ctx, f, names[i], boot)
	}
	return f
}

func passed() *guestResult { return &guestResult{verdict: "pass", exit: codePass<<1 | 1} }

func failed(reason string) *guestResult {
	return &guestResult{verdict: "fail", reason: reason, exit: codeFail<<1 | 1}
}

// untilKilled is a boot that runs until its power is cut.
func untilKilled(ctx context.Context) *guestResult {
	<-ctx.Done()
	return &guestResult{exit: -1, err: fmt.Errorf("vmtest: %w (qemu killed)", context.Cause(ctx))}
}

func outcomes(f *fleet) map[string]GuestOutcome {
	out := map[string]GuestOutcome{}
	for i, b := range f.wait() {
		out[f.guests[i].name] = outcome(f.guests[i].name, b)
	}
	return out
}

// A guest killed by another and booted again: the killed boot is not a
// failure, the outcome is the second boot's, and the boot number counts.
func TestFleetKillAndBootAgain(t *testing.T) {
	for _, second := range []string{"pass", "fail"} {
		t.Run(second, func(t *testing.T) {
			f := fakeFleet(t, []string{"a", "b"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
				switch {
				case name == "a":
					if err := f.kill("a", "b"); err != nil {
						return failed(err.Error())
					}
					if err := f.boot("b"); err != nil {
						return failed(err.Error())
					}
					return passed()
				case boot == 1:
					return untilKilled(ctx)
				case second == "fail":
					return failed("boot 2 check")
				}
				return passed()
			})
			f.startAll()
			o := outcomes(f)
			if !o["a"].Passed || o["a"].Boots != 1 {
				t.Fatalf("a: %+v", o["a"])
			}
			b := o["b"]
			if b.Boots != 2 || b.PoweredOff {
				t.Fatalf("b: %+v", b)
			}
			if second == "pass" && !b.Passed {
				t.Errorf("b failed although its last boot passed: %+v", b)
			}
			if second == "fail" && (b.Passed || !strings.Contains(b.Reason, "boot 2 check") || !strings.Contains(b.Reason, "(boot 2)")) {
				t.Errorf("b: %+v, want the second boot's failure", b)
			}
		})
	}
}

// A guest killed and never booted again passes, saying it stayed off; the
// run ends although it was never booted again.
func TestFleetKilledStaysOff(t *testing.T) {
	f := fakeFleet(t, []string{"a", "b"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
		if name == "b" {
			return untilKilled(ctx)
		}
		if err := f.kill("a", "b"); err != nil {
			return failed(err.Error())
		}
		return passed()
	})
	f.startAll()
	o := outcomes(f)
	if b := o["b"]; !b.Passed || !b.PoweredOff || !strings.Contains(b.Reason, "powered off by guest a during boot 1") {
		t.Errorf("b: %+v", b)
	}
	if !o["a"].Passed {
		t.Errorf("a: %+v", o["a"])
	}
}

// A guest that fails on its own is a failure even if it was killed on an
// earlier boot; a timeout is not a power cut.
func TestFleetTimeoutIsNotAPowerCut(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	f := fakeFleet(t, []string{"a"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
		cancel(fmt.Errorf("timed out after 1s"))
		return untilKilled(ctx)
	})
	f.ctx = ctx
	f.startAll()
	if o := outcomes(f)["a"]; o.Passed || o.PoweredOff || !strings.Contains(o.Reason, "timed out") {
		t.Errorf("a: %+v, want a timeout failure", o)
	}
}

// Requests that cannot be carried out are refused with a reason.
func TestFleetRefusals(t *testing.T) {
	errs := map[string]string{}
	f := fakeFleet(t, []string{"a", "b", "c"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
		if name != "a" {
			return untilKilled(ctx)
		}
		note := func(what string, err error) {
			if err == nil {
				errs[what] = "<nil>"
			} else {
				errs[what] = err.Error()
			}
		}
		note("kill self", f.kill("a", "a"))
		note("kill unknown", f.kill("a", "z"))
		note("boot running", f.boot("b"))
		note("kill b", f.kill("a", "b"))
		note("kill b again", f.kill("a", "b"))
		note("kill c", f.kill("a", "c"))
		return passed()
	})
	f.startAll()
	f.wait()
	for what, want := range map[string]string{
		"kill self":    "cannot kill itself",
		"kill unknown": `no guest named "z"`,
		"boot running": "guest b is running",
		"kill b":       "<nil>",
		"kill b again": "guest b is not running",
		"kill c":       "<nil>",
	} {
		if !strings.Contains(errs[what], want) {
			t.Errorf("%s: %q, want %q", what, errs[what], want)
		}
	}
}

// A power cut removes the killed boot's status, events and requests from
// the share; a request of an earlier boot is dropped, not carried out.
func TestFleetKillResetsShare(t *testing.T) {
	var left []string
	var staleAnswered bool
	written := make(chan struct{})
	f := fakeFleet(t, []string{"a", "b"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
		if name == "b" {
			if boot == 1 {
				for _, n := range []string{"b.status", "b.event.up", "b.hostreq.1.1", "b.hostresp.1.1", "b.tmpreq.1.2", "bb.event.up"} {
					os.WriteFile(filepath.Join(f.shared, n), []byte("x"), 0o644)
				}
				close(written)
				return untilKilled(ctx)
			}
			return passed()
		}
		<-written
		if err := f.kill("a", "b"); err != nil {
			return failed(err.Error())
		}
		names, _ := listDir(f.shared)
		for n := range names {
			left = append(left, n)
		}
		// A request boot 1 wrote (seen by the host only now) is stale.
		stale := filepath.Join(f.shared, "b.hostreq.1.3")
		os.WriteFile(stale, []byte("kill a"), 0o644)
		f.serveHostRequest(stale)
		_, err := os.Stat(filepath.Join(f.shared, "b.hostresp.1.3"))
		staleAnswered = err == nil
		if err := f.boot("b"); err != nil {
			return failed(err.Error())
		}
		return passed()
	})
	f.startAll()
	o := outcomes(f)
	if !o["a"].Passed || !o["b"].Passed {
		t.Fatalf("outcomes %+v", o)
	}
	if len(left) != 1 || left[0] != "bb.event.up" {
		t.Errorf("share after the kill: %v, want only another guest's bb.event.up", left)
	}
	if staleAnswered {
		t.Errorf("a request of b's killed boot was answered")
	}
}

// A guest whose first boot failed on its own and that was booted again
// fails, even though its second boot passed.
func TestFleetEarlierFailureStays(t *testing.T) {
	bEnded := make(chan struct{})
	f := fakeFleet(t, []string{"a", "b"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
		switch {
		case name == "a":
			<-bEnded
			for f.current(1, 1) { // until the host recorded b's end
				runtime.Gosched()
			}
			if err := f.boot("b"); err != nil {
				return failed(err.Error())
			}
			return passed()
		case boot == 1:
			close(bEnded)
			return failed("boot 1 check")
		}
		return passed()
	})
	f.startAll()
	if b := outcomes(f)["b"]; b.Passed || b.Boots != 2 || !strings.Contains(b.Reason, "boot 1 check") || !strings.Contains(b.Reason, "(boot 1 of 2)") {
		t.Errorf("b: %+v, want boot 1's failure", b)
	}
}

// A guest whose boot ends without a verdict (its kernel died) gets a
// status in the share, so that another guest waiting for its event fails
// at once; a guest that wrote its status keeps it, and a power cut
// writes none.
func TestFleetCrashEndsWaits(t *testing.T) {
	waitErr := make(chan string, 1)
	f := fakeFleet(t, []string{"a", "b", "c"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
		switch name {
		case "a":
			return &guestResult{exit: 0} // qemu gone, no verdict
		case "b":
			os.WriteFile(filepath.Join(f.shared, "b.status"), []byte("fail: its own\n"), 0o644)
			return &guestResult{exit: 0}
		default:
			ft := &fakeT{}
			env := &Env{Shared: f.shared}
			done := make(chan struct{})
			go func() {
				defer close(done)
				env.Wait(ft, "a", "created")
			}()
			select {
			case <-done:
				waitErr <- ft.msg
			case <-time.After(time.Minute): // a watchdog, not a speed bound
				waitErr <- "still waiting after a minute"
			}
			return passed()
		}
	})
	f.startAll()
	o := outcomes(f)
	if o["a"].Passed {
		t.Fatalf("a passed without a verdict: %+v", o["a"])
	}
	msg := <-waitErr
	if !strings.Contains(msg, "guest a ended (crashed: guest a: qemu exited 0 without a verdict") {
		t.Errorf("c's wait for a's event: %q, want it to fail naming a's crash", msg)
	}
	if b, _ := os.ReadFile(filepath.Join(f.shared, "b.status")); string(b) != "fail: its own\n" {
		t.Errorf("b's own status overwritten: %q", b)
	}
}

// fakeT records a Fatalf and stops the goroutine like testing.T does.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, a ...any) {
	f.msg = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

// A guest that asks for a clean reboot (Env.Reboot) and restarts is booted
// again at once, also as the only guest; that boot is no failure and its
// console is kept in the share. One that crashes instead is not booted
// again and fails.
func TestFleetReboot(t *testing.T) {
	for _, end := range []string{"restart", "panic"} {
		t.Run(end, func(t *testing.T) {
			f := fakeFleet(t, []string{"a"}, func(ctx context.Context, f *fleet, name string, boot int) *guestResult {
				if boot > 1 {
					return passed()
				}
				if err := f.requestReboot(0); err != nil {
					return failed(err.Error())
				}
				last := "reboot: Restarting system"
				if end == "panic" {
					last = "Kernel panic - not syncing: Attempted to kill init!"
				}
				return &guestResult{exit: 0, console: []string{"vmtest: clean reboot of boot 1", last}}
			})
			f.startAll()
			a := outcomes(f)["a"]
			console, err := os.ReadFile(filepath.Join(f.shared, "a.console.1"))
			switch end {
			case "restart":
				if !a.Passed || a.Boots != 2 || a.PoweredOff {
					t.Errorf("a: %+v", a)
				}
				if err != nil || !strings.Contains(string(console), "reboot: Restarting system") {
					t.Errorf("console of boot 1: %q, %v", console, err)
				}
			case "panic":
				if a.Passed || a.Boots != 1 || !strings.Contains(a.Reason, "without a verdict") {
					t.Errorf("a: %+v", a)
				}
			}
		})
	}
}
