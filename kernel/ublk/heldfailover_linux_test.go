//go:build linux

package ublk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/internal/nvmetest"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"golang.org/x/sys/unix"
)

// TestIntegrationHeldRequestDisposition measures, on a real 6.12 kernel,
// what an NVMe/TCP host does with a request whose ublk server completes it
// with a given errno, and with a request the server holds (a frozen
// engine): ublk server -> blk_status -> nvmet bdev backend -> NVMe status
// -> the host's nvme_decide_disposition (complete with an error, retry on
// the same path, fail over to another path).
//
// One guest: a ublk device served by this process from an in-memory
// backend whose writes can fail with a chosen errno or be held; nvmet
// exports it on two nvme-tcp ports of 127.0.0.1 (same subsystem and
// namespace, ANA group 2: optimized on port 1, non-optimized on port 2),
// and the guest connects both ports (one multipath head, two paths). Each
// case writes 4 KiB with O_DIRECT through the head (or reads, or
// flushes) and records what the caller sees, how many attempts reached
// the backend, and which path completed it. The table it prints (HELD lines) is docs/nvmeof.md's
// "Which completion fails over" table. Last, a real engine volume behind
// ublk is frozen with a write held and handed off (engine.Volume.HandOff).
// Asserted: only behaviour that the recommendation relies on (a held
// request handed off reaches the caller without an error; -EIO is an
// error; the I/O-timeout and unlink routes lose nothing; the engine's
// hand-off completes with ENODATA and carries a flush out); times are
// printed, not checked.
func TestIntegrationHeldRequestDisposition(t *testing.T) {
	vmtest.Run(t, vmtest.Options{
		Timeout: 5 * time.Minute,
		Guests: []vmtest.GuestConfig{{
			Name: "a", Kernel: vmtest.Kernel612, CPUs: 2,
			Modules: append([]string{"ublk_drv"}, nvmetest.Modules(true, true, false)...),
		}},
	}, heldDispositionGuest)
}

const heldNQN = "nqn.2026-11.io.fabraid:vol:heldtest"

// faultMem is a Mem whose writes can fail, and whose writes, reads and
// flushes can be held.
type faultMem struct {
	*Mem
	mu       sync.Mutex
	failLeft int        // next write attempts to fail with errno (-1: all)
	errno    unix.Errno // for failLeft
	hold     bool       // hold requests until release
	held     chan struct{}
	release  chan unix.Errno // 0: let the held request proceed; errHandOff: hand it off
	attempts int
}

// errHandOff, sent on release, fails the held request with a hand-off
// error (HandOffError, what a handed-off engine volume returns):
// kernel/ublk then completes it with HandOffResult.
const errHandOff = unix.Errno(1 << 20)

// enter counts an attempt and holds or fails it as armed.
func (m *faultMem) enter(write bool) error {
	m.mu.Lock()
	m.attempts++
	if m.hold {
		held, release := m.held, m.release
		m.mu.Unlock()
		held <- struct{}{}
		switch e := <-release; e {
		case 0:
			return nil
		case errHandOff:
			return handOffErr{}
		default:
			return e
		}
	}
	if write && m.failLeft != 0 {
		if m.failLeft > 0 {
			m.failLeft--
		}
		e := m.errno
		if e == errHandOff {
			m.mu.Unlock()
			return handOffErr{}
		}
		m.mu.Unlock()
		return e
	}
	m.mu.Unlock()
	return nil
}

func (m *faultMem) WriteAt(p []byte, off int64) (int, error) {
	if err := m.enter(true); err != nil {
		return 0, err
	}
	return m.Mem.WriteAt(p, off)
}

func (m *faultMem) ReadAt(p []byte, off int64) (int, error) {
	if err := m.enter(false); err != nil {
		return 0, err
	}
	return m.Mem.ReadAt(p, off)
}

func (m *faultMem) Flush() error {
	if err := m.enter(false); err != nil {
		return err
	}
	return m.Mem.Flush()
}

// arm sets the failure mode and resets the attempt count.
func (m *faultMem) arm(fail int, e unix.Errno) {
	m.mu.Lock()
	m.failLeft, m.errno, m.attempts = fail, e, 0
	m.mu.Unlock()
}

// armHold makes the next writes wait for release.
func (m *faultMem) armHold() {
	m.mu.Lock()
	m.hold, m.attempts = true, 0
	m.held, m.release = make(chan struct{}, 16), make(chan unix.Errno, 16)
	m.mu.Unlock()
}

func (m *faultMem) unhold() {
	m.mu.Lock()
	m.hold = false
	m.mu.Unlock()
}

func (m *faultMem) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attempts
}

type heldRig struct {
	t      *testing.T
	mem    *faultMem
	host   *nvmf.Host
	head   *os.File
	c1, c2 nvmf.Controller // controllers of port 1 and port 2
	spec   nvmet.Spec
	off    int64
	buf    []byte
}

func heldDispositionGuest(t *testing.T, g *vmtest.Env) {
	// A short host I/O timeout, so that the case that waits for it stays
	// short; it applies to controllers connected after the write.
	if err := os.WriteFile("/sys/module/nvme_core/parameters/io_timeout", []byte("8"), 0); err != nil {
		t.Fatal(err)
	}
	ctl, err := OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	mem := &faultMem{Mem: NewMem(64 << 20)}
	// One async queue: a lone request is served in the queue thread, so a
	// held one also holds the failed-over retry that comes back to this
	// device until it is released (the cases below release it in time).
	d, err := Create(ctl, mem, &Config{ID: AnyID, Queues: 1, Depth: 16, Async: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	id, err := nvmf.LoadHostIdentity("/etc/nvme")
	if err != nil {
		t.Fatal(err)
	}
	r := &heldRig{t: t, mem: mem, host: nvmf.NewHost(), buf: nvmetest.AlignedBuf(4096)}
	r.spec = nvmet.Spec{
		Hosts: []nvmet.Host{{NQN: id.NQN}},
		Subsystems: []nvmet.Subsystem{{NQN: heldNQN, Model: "fabraid", AllowedHosts: []string{id.NQN},
			Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: d.BlockPath(), UUID: "4e4e4e4e-0000-4000-8000-000000000025", ANAGroup: 2}}}},
		Ports: []nvmet.Port{
			{ID: 18001, Transport: nvmet.TCP, Address: "127.0.0.1", ServiceID: "4420", Subsystems: []string{heldNQN},
				ANAStates: map[uint32]nvmet.ANAState{2: nvmet.Optimized}},
			{ID: 18002, Transport: nvmet.TCP, Address: "127.0.0.1", ServiceID: "4421", Subsystems: []string{heldNQN},
				ANAStates: map[uint32]nvmet.ANAState{2: nvmet.NonOptimized}},
		},
	}
	tg := nvmet.New(nvmet.DefaultRoot)
	if _, err := tg.Apply(r.spec); err != nil {
		t.Fatal(err)
	}
	defer tg.Apply(nvmet.Spec{})
	vp, _ := nvmf.Profile(nvmf.ProfileVolumePath)
	ctx := t.Context()
	for i, svc := range []string{"4420", "4421"} {
		c, err := r.host.Connect(nvmf.Options{Transport: nvmf.TCP, Address: "127.0.0.1", ServiceID: svc, NQN: heldNQN,
			HostNQN: id.NQN, HostID: id.ID, Timeouts: &vp})
		if err != nil {
			t.Fatal(err)
		}
		defer r.host.Disconnect(c.Name)
		if c, err = r.host.WaitPaths(ctx, c.Name, 1); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			r.c1 = c
		} else {
			r.c2 = c
		}
	}
	if r.c1.Paths[0].Head != r.c2.Paths[0].Head {
		t.Fatalf("two heads: %s and %s", r.c1.Paths[0].Head, r.c2.Paths[0].Head)
	}
	r.head, err = os.OpenFile("/dev/"+r.c1.Paths[0].Head, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.head.Close()
	r.waitANA(r.c1, "optimized")
	r.waitANA(r.c2, "non-optimized")
	if _, err := r.write(); err != nil {
		t.Fatalf("healthy write: %v", err)
	}

	// 1. Completion errno -> what the writer sees, on a path that stays
	// optimized. "first" fails only the first attempt (a retry would
	// succeed), "all" fails every attempt (counts the retries).
	for _, e := range []unix.Errno{unix.EIO, unix.ENOLINK, unix.ENODEV, unix.EAGAIN, unix.EBUSY, unix.ETIMEDOUT,
		unix.EREMOTEIO, unix.ENOSPC, unix.ENODATA, unix.EOPNOTSUPP, unix.EILSEQ, unix.ENOMEM, unix.EBADE, unix.EINVAL,
		errHandOff} {
		mem.arm(1, e)
		p1, p2 := r.pathWrites()
		dt, err := r.write()
		q1, q2 := r.pathWrites()
		first := mem.count()
		mem.arm(-1, e)
		dtAll, errAll := r.write()
		all := mem.count()
		mem.arm(0, 0)
		t.Logf("HELD errno=%s first-only: writer=%v attempts=%d path1+%d path2+%d in %v; every attempt: writer=%v attempts=%d in %v",
			completionName(e), errText(err), first, q1-p1, q2-p2, dt.Round(time.Millisecond), errText(errAll), all, dtAll.Round(time.Millisecond))
		if e == unix.EIO && err == nil {
			t.Errorf("EIO: the writer saw no error")
		}
		if e == errHandOff && (err != nil || errAll == nil) {
			t.Errorf("hand-off on an optimized path: first-only %v (want ok: retried), every attempt %v (want an error)", err, errAll)
		}
	}

	// 2. A held request, port 1 turned inaccessible (or change), then the
	// held request completed with errno.
	for _, c := range []struct {
		op    string
		state nvmet.ANAState
		errno unix.Errno
	}{
		// The hand-off as the engine does it: the backend fails the held
		// request, its HandOffError makes the queue complete it with -ENODATA.
		{"write", nvmet.Inaccessible, errHandOff},
		{"write", nvmet.Change, errHandOff},
		{"write", nvmet.Optimized, errHandOff}, // no ANA change first: retried on the same path
		{"write", nvmet.Inaccessible, unix.EIO},
		{"write", nvmet.Inaccessible, unix.ENOLINK},
		{"write", nvmet.Inaccessible, unix.ENODATA}, // a backend's own ENODATA: EIO
		{"read", nvmet.Inaccessible, errHandOff},
		{"flush", nvmet.Inaccessible, errHandOff},
	} {
		r.heldThenComplete(c.op, c.state, c.errno)
	}

	// 3. A held request, port 1 inaccessible, nothing completed: the host
	// waits for its I/O timeout (8 s here), resets the controller and
	// fails the request over.
	r.heldUntilTimeout()

	// 4. A held request, the subsystem unlinked from port 1 (the old
	// owner's fence): nvmet shuts the sockets down and the host fails the
	// request over at once.
	r.heldThenUnlink()

	// 5. The real engine behind ublk: HandOff of a frozen volume completes
	// its held write, and later reads and writes, with -ENODATA; a flush
	// is carried out.
	engineHandOff(t, ctl)
}

// engineHandOff serves an engine volume (2+1 on files) through ublk,
// freezes it with a write held, hands it off and checks what the ublk
// device's callers get.
func engineHandOff(t *testing.T, ctl *Control) {
	var devs []engine.Member
	var names []string
	for i := range 3 {
		path := fmt.Sprintf("/tmp/hmember%d.img", i)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(8 << 20); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, engine.NewFileMember(f))
		names = append(names, path)
	}
	vol, err := engine.Create(engine.Config{Name: "handoff", K: 2, M: 1, ChunkSize: 64 << 10, AssumeZeroed: true}, devs, names, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	d, err := Create(ctl, vol, &Config{ID: AnyID, Queues: 1, Depth: 8, Async: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := os.OpenFile(d.BlockPath(), os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := nvmetest.AlignedBuf(64 << 10)
	if _, err := f.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	vol.Freeze()
	held := make(chan error, 1)
	go func() {
		_, err := f.WriteAt(buf, 128<<10)
		held <- err
	}()
	inflight := "/sys/block/" + strings.TrimPrefix(d.BlockPath(), "/dev/") + "/inflight"
	for t0 := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(inflight)
		if f := strings.Fields(string(b)); len(f) == 2 && f[1] != "0" {
			break
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("the write never reached the frozen volume (%s: %q)", inflight, b)
		}
	}
	select {
	case err := <-held:
		t.Fatalf("write to a frozen volume completed: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	t0 := time.Now()
	if err := vol.HandOff(); err != nil {
		t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("held write still held 10 s after HandOff")
	}
	dt := time.Since(t0)
	_, rerr := f.ReadAt(buf, 0)
	serr := f.Sync()
	t.Logf("HELD engine volume frozen, then HandOff: held write %v %v after it; read %v; fsync %v",
		errText(werr), dt.Round(time.Millisecond), errText(rerr), errText(serr))
	if !errors.Is(werr, unix.ENODATA) || !errors.Is(rerr, unix.ENODATA) {
		t.Errorf("after HandOff: held write %v, read %v; want ENODATA (the hand-off completion)", werr, rerr)
	}
	if serr != nil {
		t.Errorf("fsync after HandOff: %v, want it carried out", serr)
	}
}

// write writes 4 KiB through the head at the next offset.
func (r *heldRig) write() (time.Duration, error) {
	off := r.off
	r.off = (r.off + 4096) % (32 << 20)
	nvmetest.Pattern(r.buf, 25, off)
	t0 := time.Now()
	_, err := r.head.WriteAt(r.buf, off)
	return time.Since(t0), err
}

// asyncWrite starts a write and returns its result channel.
func (r *heldRig) asyncWrite() <-chan writeResult {
	ch := make(chan writeResult, 1)
	go func() {
		dt, err := r.write()
		ch <- writeResult{dt, err}
	}()
	return ch
}

type writeResult struct {
	dt  time.Duration
	err error
}

// pathWrites returns the completed reads and writes of the two path
// devices.
func (r *heldRig) pathWrites() (int64, int64) {
	return statWrites(r.c1.Paths[0].Name), statWrites(r.c2.Paths[0].Name)
}

func statWrites(dev string) int64 {
	b, err := os.ReadFile(filepath.Join("/sys/block", dev, "stat"))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 5 {
		return -1
	}
	reads, _ := strconv.ParseInt(f[0], 10, 64)
	writes, _ := strconv.ParseInt(f[4], 10, 64)
	return reads + writes
}

func (r *heldRig) setANA(port uint16, s nvmet.ANAState) {
	p := fmt.Sprintf("%s/ports/%d/ana_groups/2/ana_state", nvmet.DefaultRoot, port)
	if err := os.WriteFile(p, []byte(s), 0); err != nil {
		r.t.Fatal(err)
	}
}

// waitANA waits until the host shows path state want for c's path.
func (r *heldRig) waitANA(c nvmf.Controller, want string) time.Duration {
	t0 := time.Now()
	for {
		cc, err := r.host.Sysfs.Controller(c.Name)
		if err == nil && cc.State == "live" && len(cc.Paths) > 0 && cc.Paths[0].ANAState == want {
			return time.Since(t0)
		}
		if time.Since(t0) > 30*time.Second {
			r.t.Fatalf("%s: path state %+v, want live and %s (%v)", c.Name, cc, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHeld waits until the backend holds a write.
func (r *heldRig) waitHeld() {
	select {
	case <-r.mem.held:
	case <-time.After(10 * time.Second):
		r.t.Fatal("no write reached the backend")
	}
}

// restore puts port 1 back to optimized and waits for the host to see it.
func (r *heldRig) restore() {
	r.mem.unhold()
	r.setANA(18001, nvmet.Optimized)
	r.waitANA(r.c1, "optimized")
	r.waitANA(r.c2, "non-optimized")
}

// heldThenComplete holds one request of kind op ("write", "read",
// "flush"), turns port 1 to state, then completes the held request with e
// (errHandOff: a hand-off through HandOffError).
func (r *heldRig) heldThenComplete(op string, state nvmet.ANAState, e unix.Errno) {
	t := r.t
	r.mem.armHold()
	p1, p2 := r.pathWrites()
	res := r.asyncOp(op)
	r.waitHeld()
	if state != nvmet.Optimized {
		r.setANA(18001, state)
	}
	r.mem.unhold() // later attempts (retries) proceed
	t1 := time.Now()
	r.mem.release <- e
	var w writeResult
	select {
	case w = <-res:
	case <-time.After(60 * time.Second):
		t.Fatalf("held %s, port 1 %s, completed with %s: no completion in 60 s", op, state, completionName(e))
	}
	q1, q2 := r.pathWrites()
	t.Logf("HELD held %s, port1 %s, completed with %s: caller=%v %v after the completion, attempts=%d path1 I/Os+%d path2 I/Os+%d",
		op, state, completionName(e), errText(w.err), time.Since(t1).Round(time.Millisecond), r.mem.count(), q1-p1, q2-p2)
	if e == errHandOff && w.err != nil {
		t.Errorf("held %s completed with %s after port 1 turned %s: caller saw %v, want no error", op, completionName(e), state, w.err)
	}
	if e == unix.EIO && w.err == nil {
		t.Errorf("held %s completed with EIO: caller saw no error", op)
	}
	r.restore()
}

func completionName(e unix.Errno) string {
	if e == errHandOff {
		return "a hand-off (HandOffError)"
	}
	return errnoName(e)
}

// asyncOp starts one request of kind op through the head.
func (r *heldRig) asyncOp(op string) <-chan writeResult {
	switch op {
	case "write":
		return r.asyncWrite()
	case "read":
		ch := make(chan writeResult, 1)
		buf := nvmetest.AlignedBuf(4096)
		go func() {
			t0 := time.Now()
			_, err := r.head.ReadAt(buf, 0)
			ch <- writeResult{time.Since(t0), err}
		}()
		return ch
	case "flush":
		ch := make(chan writeResult, 1)
		go func() {
			t0 := time.Now()
			err := r.head.Sync()
			ch <- writeResult{time.Since(t0), err}
		}()
		return ch
	}
	panic(op)
}

func (r *heldRig) heldUntilTimeout() {
	t := r.t
	r.mem.armHold()
	res := r.asyncWrite()
	r.waitHeld()
	t0 := time.Now()
	r.setANA(18001, nvmet.Inaccessible)
	r.mem.unhold()
	// The host notices at its I/O timeout: the controller resets.
	var reset time.Duration
	for reset == 0 && time.Since(t0) < 40*time.Second {
		if cc, err := r.host.Sysfs.Controller(r.c1.Name); err == nil && cc.State != "live" {
			reset = time.Since(t0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Only now give the held request back (it reaches no host): the
	// backend's queue may serve the failed-over retry only after it.
	r.mem.release <- unix.EIO
	w := <-res
	t.Logf("HELD held, port1 inaccessible, nothing completed: controller of port 1 left live %v after the ANA change (io_timeout 8 s); writer=%v after %v",
		reset.Round(time.Millisecond), errText(w.err), w.dt.Round(time.Millisecond))
	if w.err != nil {
		t.Errorf("held write failed over at the I/O timeout: writer saw %v", w.err)
	}
	r.waitANA(r.c1, "inaccessible")
	r.restore()
}

func (r *heldRig) heldThenUnlink() {
	t := r.t
	r.mem.armHold()
	p1, p2 := r.pathWrites()
	res := r.asyncWrite()
	r.waitHeld()
	r.mem.unhold()
	link := filepath.Join(nvmet.DefaultRoot, "ports/18001/subsystems", heldNQN)
	t0 := time.Now()
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	unlinked := time.Since(t0)
	var left time.Duration
	for left == 0 && time.Since(t0) < 20*time.Second {
		if cc, err := r.host.Sysfs.Controller(r.c1.Name); err != nil || cc.State != "live" {
			left = time.Since(t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var w writeResult
	early := false
	select {
	case w = <-res:
		early = true
	case <-time.After(2 * time.Second):
		r.mem.release <- unix.EIO // reaches no host: the socket is shut
		w = <-res
	}
	q1, q2 := r.pathWrites()
	t.Logf("HELD held, subsystem unlinked from port 1: unlink returned in %v, controller of port 1 left live %v after; writer=%v (completed before the held request was released: %v), path1+%d path2+%d",
		unlinked.Round(time.Millisecond), left.Round(time.Millisecond), errText(w.err), early, q1-p1, q2-p2)
	if w.err != nil {
		t.Errorf("held write after the unlink: writer saw %v", w.err)
	}
	if _, err := nvmet.New(nvmet.DefaultRoot).Apply(r.spec); err != nil {
		t.Fatal(err)
	}
}

func errnoName(e unix.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return strconv.Itoa(int(e))
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return "error " + errnoName(e)
	}
	return "error " + err.Error()
}
