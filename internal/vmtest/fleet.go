package vmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// fleet runs the guests of one Boot across power cuts and reboots. Every
// guest is booted once at the start; a host request can kill one (SIGKILL
// of its qemu: no clean shutdown) and boot it again with the same disk
// images, MAC, address and hub port. The run is over when no guest is
// running: a guest that is off can only be booted by a running one.
type fleet struct {
	ctx    context.Context // the run's; its end kills every guest
	shared string
	guests []*qemuGuest
	hub    *hub // nil with one guest
	log    func(guest, line string)
	// run boots guest i once (the boot-th time) until it ends or ctx
	// ends: qemuGuest.run, or a fake in unit tests.
	run func(ctx context.Context, i, boot int) *guestResult

	mu      sync.Mutex
	power   []*power
	running int
	idle    chan struct{} // closed when running drops to 0
}

// power is the state of one guest across its boots.
type power struct {
	boot    int                     // number of the current or last boot, from 1
	stop    context.CancelCauseFunc // kills the running boot; nil while off
	done    chan struct{}           // closed when the running boot ended
	results []*guestResult          // one per ended boot
	// reboot is the boot that asked for a clean reboot of itself
	// (Env.Reboot): when it ends by restarting the machine, the guest is
	// booted again at once.
	reboot int
}

// powerCut is the cause a killed boot ends with.
type powerCut struct{ by string }

func (p *powerCut) Error() string { return "power cut by guest " + p.by }

func newFleet(ctx context.Context, shared string, guests []*qemuGuest, h *hub, log func(string, string)) *fleet {
	f := &fleet{ctx: ctx, shared: shared, guests: guests, hub: h, log: log, idle: make(chan struct{})}
	f.run = func(ctx context.Context, i, boot int) *guestResult { return guests[i].run(ctx, boot) }
	for range guests {
		f.power = append(f.power, &power{})
	}
	return f
}

// startAll boots every guest for the first time.
func (f *fleet) startAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.guests {
		f.start(i)
	}
}

// start boots guest i once more; f.mu is held.
func (f *fleet) start(i int) {
	p := f.power[i]
	p.boot++
	boot := p.boot
	ctx, stop := context.WithCancelCause(f.ctx)
	done := make(chan struct{})
	p.stop, p.done = stop, done
	f.running++
	go func() {
		res := f.run(ctx, i, boot)
		stop(nil)
		res.boot = boot
		var cut *powerCut
		if res.err != nil && errors.As(res.err, &cut) {
			res.cutBy = cut.by
		}
		f.mu.Lock()
		res.rebooted = res.cutBy == "" && p.reboot == boot && res.restarted()
		f.mu.Unlock()
		if res.cutBy == "" && res.verdict == "" && !res.rebooted {
			f.markEnded(i, res)
		}
		f.mu.Lock()
		p.results = append(p.results, res)
		p.stop = nil
		if res.rebooted && f.ctx.Err() == nil {
			f.rebootLocked(i, res)
		}
		f.running--
		if f.running == 0 {
			close(f.idle)
		}
		f.mu.Unlock()
		close(done)
	}()
}

// markEnded writes guest i's status into the share for a boot that
// ended without a verdict and not by a power cut (a kernel panic, qemu
// gone): the guest could not write it, and the other guests' Env.Wait
// for its events then fails at once instead of at the run's timeout. A
// status the guest wrote itself is kept.
func (f *fleet) markEnded(i int, res *guestResult) {
	name := f.guests[i].name
	tmp := filepath.Join(f.shared, name+".host-status")
	if err := os.WriteFile(tmp, []byte("crashed: "+res.describe(name)+"\n"), 0o644); err != nil {
		return
	}
	os.Link(tmp, filepath.Join(f.shared, name+".status")) // whole when seen; fails if the guest wrote one
	os.Remove(tmp)
}

// requestReboot records that guest i's running boot is about to reboot
// itself cleanly (Env.Reboot).
func (f *fleet) requestReboot(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.power[i]
	if p.stop == nil {
		return fmt.Errorf("guest %s is not running", f.guests[i].name)
	}
	p.reboot = p.boot
	return nil
}

// rebootLocked boots guest i again after its boot res ended with the
// clean reboot it asked for: that boot's console is kept in the share as
// <guest>.console.<boot> (Env.BootConsole), its per-boot files are
// removed. f.mu is held.
func (f *fleet) rebootLocked(i int, res *guestResult) {
	name := f.guests[i].name
	os.WriteFile(filepath.Join(f.shared, fmt.Sprintf("%s.console.%d", name, res.boot)),
		[]byte(strings.Join(res.console, "\n")+"\n"), 0o644)
	if err := f.resetShare(name); err != nil && f.log != nil {
		f.log(name, "vmtest: "+err.Error())
	}
	f.start(i)
	if f.log != nil {
		f.log(name, fmt.Sprintf("vmtest: clean reboot, boot %d", f.power[i].boot))
	}
}

// index returns the index of the named guest.
func (f *fleet) index(name string) (int, error) {
	for i, g := range f.guests {
		if g.name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no guest named %q", name)
}

// current reports whether guest i is running its boot-th boot: requests
// from an earlier boot (written just before a kill) are stale.
func (f *fleet) current(i, boot int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.power[i].stop != nil && f.power[i].boot == boot
}

// kill cuts the power of the named guest and returns once its qemu is
// gone and its per-boot files in the share are removed.
func (f *fleet) kill(by, name string) error {
	i, err := f.index(name)
	if err != nil {
		return err
	}
	if name == by {
		return errors.New("a guest cannot kill itself (nobody could boot it again)")
	}
	f.mu.Lock()
	p := f.power[i]
	stop, done := p.stop, p.done
	f.mu.Unlock()
	if stop == nil {
		return fmt.Errorf("guest %s is not running", name)
	}
	stop(&powerCut{by: by})
	<-done
	if f.log != nil {
		f.log(name, "vmtest: power cut by guest "+by)
	}
	return f.resetShare(name)
}

// boot boots the named guest again, which must be off; it returns once
// qemu is started, not when the guest is up.
func (f *fleet) boot(name string) error {
	i, err := f.index(name)
	if err != nil {
		return err
	}
	if err := f.ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.power[i].stop != nil {
		return fmt.Errorf("guest %s is running (Kill it first)", name)
	}
	if f.running == 0 {
		return errors.New("the run is over")
	}
	if err := f.resetShare(name); err != nil {
		return err
	}
	f.start(i)
	if f.log != nil {
		f.log(name, fmt.Sprintf("vmtest: boot %d", f.power[i].boot))
	}
	return nil
}

// resetShare removes what one boot of the guest left in the share: its
// status, its events (events are per boot) and its host requests.
func (f *fleet) resetShare(name string) error {
	for _, pat := range []string{".status", ".event.*", ".hostreq.*", ".hostresp.*", ".tmpreq.*"} {
		files, _ := filepath.Glob(filepath.Join(f.shared, name+pat))
		for _, p := range files {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("reset %s's share: %w", name, err)
			}
		}
	}
	return nil
}

// wait blocks until no guest runs and returns each guest's boots' results.
func (f *fleet) wait() [][]*guestResult {
	<-f.idle
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]*guestResult, len(f.power))
	for i, p := range f.power {
		out[i] = p.results
	}
	return out
}

// outcome turns the boots of one guest into its outcome: the last boot's,
// where a boot killed by a power cut (and not booted again) passes. An
// earlier boot that failed on its own (it was not killed: Env.Boot of a
// guest that had ended) fails the guest too: a reboot does not hide it.
func outcome(name string, boots []*guestResult) GuestOutcome {
	o := GuestOutcome{Name: name, Boots: len(boots)}
	for i, r := range boots {
		if i > 0 {
			o.Console = append(o.Console, fmt.Sprintf("vmtest: --- boot %d ---", r.boot))
		}
		o.Console = append(o.Console, r.console...)
	}
	for _, r := range boots[:len(boots)-1] {
		if r.cutBy == "" && !r.rebooted && !r.ok() && !r.skipped() {
			o.Reason = fmt.Sprintf("%s (boot %d of %d)", r.describe(name), r.boot, len(boots))
			return o
		}
	}
	last := boots[len(boots)-1]
	switch {
	case last.cutBy != "":
		o.Passed = true
		o.PoweredOff = true
		o.Reason = fmt.Sprintf("powered off by guest %s during boot %d and not booted again", last.cutBy, last.boot)
	case last.skipped():
		o.Skipped = true
		o.Reason = skipReason(last.console)
	case last.ok():
		o.Passed = true
	default:
		o.Reason = last.describe(name)
		if len(boots) > 1 {
			o.Reason += fmt.Sprintf(" (boot %d)", last.boot)
		}
	}
	return o
}

// skipped reports whether the guest's test skipped: skip marker AND skip
// exit code.
func (r *guestResult) skipped() bool {
	return r.err == nil && r.verdict == "skip" && r.exit == (codeSkip<<1|1)
}
