package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// requireStatic fails unless the ELF binary has no program interpreter:
// the guest has no dynamic loader or libc.
func requireStatic(b []byte, name string) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("vmtest: %s is not an ELF binary: %w", name, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("vmtest: %s is dynamically linked; build it with CGO_ENABLED=0", name)
		}
	}
	return nil
}

// accel picks the qemu accelerator: TCG unless KVM really works (hardware
// virtualisation in cpuinfo and not the kvm_pvm software hypervisor, which
// fails on stock kernels). FABRAID_VMTEST_ACCEL overrides.
func accel() []string {
	if a := os.Getenv("FABRAID_VMTEST_ACCEL"); a != "" {
		if a == "kvm" {
			return []string{"-accel", "kvm", "-cpu", "host"}
		}
		return []string{"-accel", a, "-cpu", tcgCPU}
	}
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	_, pvmErr := os.Stat("/sys/module/kvm_pvm")
	_, kvmErr := os.Stat("/dev/kvm")
	hw := bytes.Contains(cpuinfo, []byte(" vmx")) || bytes.Contains(cpuinfo, []byte(" svm"))
	if kvmErr == nil && hw && errors.Is(pvmErr, os.ErrNotExist) {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", "tcg", "-cpu", tcgCPU}
}

// tcgCPU is the emulated CPU: qemu's max without CMPXCHG16B. Every guest
// kernel that died of a double fault under TCG (docs/testing.md, "Kernel
// findings") died in the slab allocator's fast path, whose per-CPU
// cmpxchg16b retry loop it had just run, with RFLAGS in the frame made of
// a register's bits: what a wrong lazy-flags result of that instruction's
// emulation would leave. Without CX16 the kernel runs its
// interrupt-disabling emulation of that instruction instead.
const tcgCPU = "max,cx16=off"

// qemuGuest is one guest process ready to boot.
type qemuGuest struct {
	name      string
	kernel    *Kernel
	initrd    string
	disks     []string // raw image paths
	serials   []string
	shared    string
	memoryMB  int
	cpus      int
	netLocal  int // UDP port qemu binds (0: no NIC)
	netRemote int // UDP port of the hub
	mac       string
	nonce     string
	log       func(string)
	qmp       string // path of the QMP control socket
	systemd   bool   // boots systemd as PID 1 (GuestConfig.Systemd)
	plugs     int    // disks plugged back so far (names their block nodes)
}

// cmdline is the guest kernel's command line. systemd guests reboot (so
// qemu, with -no-reboot, exits without a verdict) instead of freezing
// when systemd crashes; FABRAID_VMTEST_SYSTEMD_DEBUG=1 makes systemd log
// at debug level straight to the console.
func (g *qemuGuest) cmdline(boot int) string {
	c := fmt.Sprintf("console=ttyS0 quiet loglevel=4 panic=-1 oops=panic mitigations=off fabraid.guest=%s fabraid.boot=%d", g.name, boot)
	if g.systemd {
		c += " systemd.crash_reboot=1 systemd.show_status=error"
		if os.Getenv("FABRAID_VMTEST_SYSTEMD_DEBUG") == "1" {
			c += " systemd.log_level=debug systemd.log_target=console"
		}
	}
	return c
}

// args builds the qemu command line of the guest's boot-th boot: the same
// disks, MAC, hub port and QMP socket every time.
func (g *qemuGuest) args(boot int) []string {
	a := []string{"qemu-system-x86_64"}
	a = append(a, accel()...)
	a = append(a,
		"-m", fmt.Sprint(g.memoryMB), "-smp", fmt.Sprint(g.cpus),
		"-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=4",
		"-kernel", g.kernel.Vmlinuz, "-initrd", g.initrd,
		"-append", g.cmdline(boot),
		"-virtfs", fmt.Sprintf("local,path=%s,mount_tag=host0,security_model=none", g.shared),
		"-qmp", fmt.Sprintf("unix:%s,server=on,wait=off", g.qmp),
	)
	for i, d := range g.disks {
		a = append(a,
			"-drive", fmt.Sprintf("file=%s,if=none,id=d%d,format=raw,cache=unsafe,aio=threads", d, i),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=d%d,id=disk%d,serial=%s", i, i, g.serials[i]))
	}
	if g.netLocal != 0 {
		a = append(a,
			"-netdev", fmt.Sprintf("dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=%d,remote.type=inet,remote.host=127.0.0.1,remote.port=%d", g.netLocal, g.netRemote),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=n0,mac=%s,romfile=", g.mac))
	} else {
		a = append(a, "-nic", "none")
	}
	return a
}

// guestResult is what one guest's run ended with.
type guestResult struct {
	verdict string // pass, fail, skip; "" when no marker was seen
	reason  string // from the marker line
	exit    int    // qemu exit code, -1 when killed
	console []string
	err     error  // harness-level error: timeout, qemu failed to start, ...
	boot    int    // which boot of the guest this was, from 1
	cutBy   string // the guest that killed this boot (Env.Kill), if any
	// rebooted: the boot asked for a clean reboot (Env.Reboot) and ended
	// by restarting the machine; the guest was booted again.
	rebooted bool
}

// restarted reports whether the guest ended by restarting the machine
// (the kernel's "reboot: Restarting system"; qemu exits 0 because of
// -no-reboot) without a verdict, a kernel crash or a harness error.
func (r *guestResult) restarted() bool {
	if r.err != nil || r.verdict != "" || r.exit != 0 {
		return false
	}
	restart := false
	for _, l := range r.console {
		if strings.Contains(l, "Kernel panic") || strings.Contains(l, "Oops:") || strings.Contains(l, "BUG:") {
			return false
		}
		restart = restart || strings.Contains(l, "reboot: Restarting system")
	}
	return restart
}

// ok reports whether the guest passed: pass marker AND pass exit code.
func (r *guestResult) ok() bool {
	return r.err == nil && r.verdict == "pass" && r.exit == (codePass<<1|1)
}

// run boots the guest and waits for it to finish or for ctx to end. A
// kernel that crashes before /init starts is booted once more: nothing of
// the test has run then, and under TCG with several vCPUs Debian's 6.12
// was seen to oops once in early boot ("Oops: int3" in sched_clock_cpu,
// during the kernel's own code patching). A crash after /init started is
// never retried: the test's own actions may have caused it.
func (g *qemuGuest) run(ctx context.Context, boot int) *guestResult {
	res := g.boot(ctx, boot)
	if !res.crashedBeforeInit() {
		return res
	}
	first := res.console
	g.logf("vmtest: guest %s: the kernel crashed before /init started (nothing of the test ran); booting it again, once", g.name)
	res = g.boot(ctx, boot)
	res.console = append(append(first, "vmtest: --- second boot ---"), res.console...)
	return res
}

func (g *qemuGuest) logf(format string, args ...any) {
	if g.log != nil {
		g.log(fmt.Sprintf(format, args...))
	}
}

// crashedBeforeInit reports whether the guest's kernel crashed (oops or
// panic on the console, no verdict) before /init printed its first line.
func (r *guestResult) crashedBeforeInit() bool {
	if r.err != nil || r.verdict != "" {
		return false
	}
	crashed := false
	for _, l := range r.console {
		if strings.Contains(l, initMarker) {
			return false
		}
		if strings.Contains(l, "Kernel panic") || strings.Contains(l, "Oops:") || strings.Contains(l, "BUG:") {
			crashed = true
		}
	}
	return crashed
}

// boot runs qemu once; qemu is killed in every path that does not end in
// its own exit.
func (g *qemuGuest) boot(ctx context.Context, boot int) *guestResult {
	res := &guestResult{exit: -1}
	argv := g.args(boot)
	os.Remove(g.qmp) // a killed qemu leaves its socket behind
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		res.err = err
		return res
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		res.err = fmt.Errorf("vmtest: start qemu (apt-get install qemu-system-x86): %w", err)
		return res
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.readConsole(stdout, res)
	}()
	done := make(chan error, 1)
	go func() {
		wg.Wait() // console drained before Wait closes the pipe
		done <- cmd.Wait()
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		res.err = fmt.Errorf("vmtest: guest %s: %w (qemu killed)", g.name, context.Cause(ctx))
		return res
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		res.exit = 0
	case errors.As(err, &ee):
		res.exit = ee.ExitCode()
	default:
		res.err = err
	}
	return res
}

func (g *qemuGuest) readConsole(r io.Reader, res *guestResult) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		res.console = append(res.console, line)
		if g.log != nil {
			g.log(line)
		}
		// The marker may follow terminal escapes the firmware left on the line.
		if i := strings.Index(line, markerPrefix+" "+g.nonce+" "); i >= 0 {
			rest := line[i+len(markerPrefix)+len(g.nonce)+2:]
			v, reason, _ := strings.Cut(rest, " ")
			res.verdict, res.reason = v, strings.TrimSpace(reason)
		}
	}
	io.Copy(io.Discard, r)
}

// describe explains a non-passing result for an error message.
func (r *guestResult) describe(name string) string {
	var b strings.Builder
	switch {
	case r.err != nil:
		fmt.Fprintf(&b, "guest %s: %v", name, r.err)
	case r.verdict == "":
		fmt.Fprintf(&b, "guest %s: qemu exited %d without a verdict (kernel panic, crash or poweroff before the test ran)", name, r.exit)
	case r.verdict == "pass":
		fmt.Fprintf(&b, "guest %s: pass marker but qemu exit code %d (want %d)", name, r.exit, codePass<<1|1)
	default:
		fmt.Fprintf(&b, "guest %s: %s: %s (qemu exit %d)", name, r.verdict, r.reason, r.exit)
	}
	return b.String()
}

// tail returns the last n console lines.
func (r *guestResult) tail(n int) string {
	c := r.console
	if len(c) > n {
		c = c[len(c)-n:]
	}
	return strings.Join(c, "\n")
}
