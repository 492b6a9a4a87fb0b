package daemon

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"time"
)

// stuckAfter is how long a reconcile runs before fabraidd logs where it
// waits (once per reconcile): a reconcile normally takes well under a
// second; only an engine start (up to 150 s, volmgr) legitimately takes
// longer, and a stack then costs one log record.
const stuckAfter = 3 * time.Minute

// maxStuckLog bounds the stacks logged for one stuck reconcile.
const maxStuckLog = 16 << 10

// ownStacks returns the stacks, in runtime/pprof's debug=2 text, of the
// goroutines that run fabraid's own code (a frame of the module), at most
// max bytes; embedded etcd's and gRPC's goroutines are left out, so that
// the record shows what the reconcile waits for.
func ownStacks(dump string, max int) string {
	var out strings.Builder
	for _, g := range strings.Split(dump, "\n\n") {
		if !strings.Contains(g, "github.com/fabraid/fabraid/") {
			continue
		}
		if out.Len()+len(g)+2 > max {
			out.WriteString("... (more goroutines left out)\n")
			break
		}
		out.WriteString(strings.TrimSpace(g))
		out.WriteString("\n\n")
	}
	return out.String()
}

// logStuck logs the daemon's own goroutines of a reconcile running for
// longer than stuckAfter.
func (d *Daemon) logStuck(runningFor time.Duration) {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		d.log.Error("reconcile still running; its stacks are unreadable", "running_for", runningFor.Round(time.Second).String(), "err", err)
		return
	}
	d.log.Error("reconcile still running; where fabraidd's goroutines wait", "running_for", runningFor.Round(time.Second).String(),
		"stacks", ownStacks(b.String(), maxStuckLog))
}
