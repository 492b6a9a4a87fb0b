package vmtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// BootConfig is the host-side description of one boot of one or more
// guests running a payload. Run builds it for tests; the demo uses it
// directly.
type BootConfig struct {
	Guests  []GuestConfig
	Timeout time.Duration
	// Binary is the static host binary started in every guest as
	// /vmtest/payload with Args, a Go test binary whose guest side reports
	// its status through Run. Env adds environment variables.
	Binary string
	Args   []string
	Env    map[string]string
	// Command, instead of Binary, is a guest command line (its files come
	// from GuestConfig.Files or busybox); its exit status is the verdict.
	Command []string
	// Log receives every console line, prefixed with the guest name.
	Log func(guest, line string)
	// Shared is the host directory shared with all guests; a temporary one
	// when empty.
	Shared string
}

// GuestOutcome is the result of one guest.
type GuestOutcome struct {
	Name    string
	Passed  bool
	Skipped bool
	Reason  string   // why it failed or skipped, or that it stayed powered off
	Console []string // every boot's console, in order
	// Boots counts the guest's boots (1 unless Env.Boot booted it again);
	// the outcome is the last boot's. PoweredOff: the last boot was
	// killed (Env.Kill) and never booted again, which passes.
	Boots      int
	PoweredOff bool
}

var guestNameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)

func (c *BootConfig) validate() error {
	if len(c.Guests) == 0 {
		return errors.New("vmtest: no guests")
	}
	seen := map[string]bool{}
	for i := range c.Guests {
		g := &c.Guests[i]
		if !guestNameRE.MatchString(g.Name) {
			return fmt.Errorf("vmtest: guest name %q: want [a-z][a-z0-9]{0,15}", g.Name)
		}
		if seen[g.Name] {
			return fmt.Errorf("vmtest: duplicate guest name %q", g.Name)
		}
		seen[g.Name] = true
		if g.Kernel == "" {
			g.Kernel = Kernel612
		}
		if g.MemoryMB == 0 {
			g.MemoryMB = 1024
		}
		if g.CPUs == 0 {
			g.CPUs = 1
		}
		for j, d := range g.Disks {
			if d.Size <= 0 {
				return fmt.Errorf("vmtest: guest %s disk %d: size must be > 0", g.Name, j)
			}
			if strings.ContainsAny(d.Serial, " \t\n,") {
				return fmt.Errorf("vmtest: guest %s disk %d: serial %q has a space or comma", g.Name, j, d.Serial)
			}
		}
	}
	if c.Timeout == 0 {
		c.Timeout = 3 * time.Minute
	}
	return nil
}

// guestAddr is the static link-local address of guest i.
func guestAddr(i int) string { return fmt.Sprintf("169.254.77.%d", i+1) }

// Boot boots every guest, runs the payload and waits for all verdicts. The
// error is non-nil only for harness failures before any guest ran
// (missing kernel, module, qemu); guest failures are in the outcomes.
func Boot(ctx context.Context, cfg BootConfig) ([]GuestOutcome, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if (cfg.Binary == "") == (len(cfg.Command) == 0) {
		return nil, errors.New("vmtest: set exactly one of BootConfig.Binary and BootConfig.Command")
	}
	if cfg.Binary != "" {
		bin, err := os.ReadFile(cfg.Binary)
		if err != nil {
			return nil, fmt.Errorf("vmtest: payload: %w", err)
		}
		if err := requireStatic(bin, cfg.Binary); err != nil {
			return nil, err
		}
	}
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "fabraid-vmtest-")
	if err != nil {
		return nil, err
	}
	if os.Getenv("FABRAID_VMTEST_KEEP") != "1" {
		defer os.RemoveAll(work)
	}
	shared := cfg.Shared
	if shared == "" {
		shared = filepath.Join(work, "shared")
		if err := os.Mkdir(shared, 0o777); err != nil {
			return nil, err
		}
	}
	guests, err := prepareGuests(cfg, work, shared)
	if err != nil {
		return nil, err
	}
	var h *hub
	if len(guests) > 1 {
		if h, err = newHub(len(guests)); err != nil {
			return nil, err
		}
		defer h.Close()
		for i, g := range guests {
			g.netLocal, g.netRemote = h.ports(i)
		}
	}
	cpus := 0
	for _, g := range guests {
		cpus += g.cpus
	}
	release, err := acquireSlots(cache, cpus)
	if err != nil {
		return nil, err
	}
	defer release()

	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout,
		fmt.Errorf("timed out after %v", cfg.Timeout))
	defer cancel()
	f := newFleet(ctx, shared, guests, h, cfg.Log)
	stopHost := f.serveHostRequests()
	defer stopHost()
	f.startAll()
	boots := f.wait()
	out := make([]GuestOutcome, len(guests))
	for i, b := range boots {
		out[i] = outcome(guests[i].name, b)
	}
	return out, nil
}

// prepareGuests resolves kernels and modules and writes each guest's
// initramfs and disks under work.
func prepareGuests(cfg BootConfig, work, shared string) ([]*qemuGuest, error) {
	nonce := make([]byte, 8)
	rand.Read(nonce)
	addrs := make([]string, len(cfg.Guests))
	for i, g := range cfg.Guests {
		addrs[i] = g.Name + "=" + guestAddr(i)
	}
	kernels := map[string]*Kernel{}
	sysroots := map[bool]*sysRoot{} // by GuestConfig.Udev
	var guests []*qemuGuest
	for i, gc := range cfg.Guests {
		k := kernels[gc.Kernel]
		if k == nil {
			var err error
			if k, err = GetKernel(gc.Kernel); err != nil {
				return nil, err
			}
			kernels[gc.Kernel] = k
		}
		want := append([]string{}, baseModules...)
		if gc.Systemd {
			want = append(want, systemdModules...)
		}
		mods, err := k.resolveModules(append(want, gc.Modules...))
		if err != nil {
			return nil, fmt.Errorf("guest %s: %w", gc.Name, err)
		}
		if gc.Udev && !gc.Systemd {
			return nil, fmt.Errorf("guest %s: Udev needs Systemd", gc.Name)
		}
		if gc.Systemd && sysroots[gc.Udev] == nil {
			if sysroots[gc.Udev], err = getSystemdRoot(gc.Udev); err != nil {
				return nil, fmt.Errorf("guest %s: %w", gc.Name, err)
			}
		}
		g := &qemuGuest{
			name: gc.Name, kernel: k, shared: shared, memoryMB: gc.MemoryMB, cpus: gc.CPUs, systemd: gc.Systemd,
			qmp:   filepath.Join(work, gc.Name+".qmp"),
			nonce: hex.EncodeToString(nonce), mac: fmt.Sprintf("52:54:00:fa:00:%02x", i+1),
		}
		if cfg.Log != nil {
			g.log = func(line string) { cfg.Log(gc.Name, line) }
		}
		var devs []string
		for j, d := range gc.Disks {
			p := filepath.Join(work, fmt.Sprintf("%s-disk%d.raw", gc.Name, j))
			if err := createSparse(p, d.Size); err != nil {
				return nil, err
			}
			serial := d.Serial
			if serial == "" {
				serial = fmt.Sprintf("%s-disk%d", gc.Name, j)
			}
			g.disks = append(g.disks, p)
			g.serials = append(g.serials, serial)
			devs = append(devs, "/dev/vd"+string(rune('a'+j)))
		}
		conf := map[string]string{
			"VMTEST_NONCE":           g.nonce,
			"FABRAID_VMTEST_GUEST":   gc.Name,
			"FABRAID_VMTEST_INDEX":   strconv.Itoa(i),
			"FABRAID_VMTEST_KERNEL":  gc.Kernel,
			"FABRAID_VMTEST_DISKS":   strings.Join(devs, " "),
			"FABRAID_VMTEST_SERIALS": strings.Join(g.serials, " "),
			"FABRAID_VMTEST_ADDRS":   strings.Join(addrs, ","),
			"FABRAID_VMTEST_SHARED":  "/mnt/host",
		}
		if len(cfg.Guests) > 1 {
			conf["VMTEST_IP"] = guestAddr(i)
		}
		if len(cfg.Command) > 0 {
			conf["VMTEST_RAW"] = "1"
		}
		for k, v := range cfg.Env {
			conf[k] = v
		}
		files := map[string]string{}
		for gp, hp := range gc.Files {
			files[gp] = hp
		}
		args := cfg.Command
		if cfg.Binary != "" {
			files["/vmtest/payload"] = cfg.Binary
			args = append([]string{"/vmtest/payload"}, cfg.Args...)
		}
		g.initrd = filepath.Join(work, gc.Name+"-initrd.cpio")
		img := guestImage{conf: conf, modules: mods, files: files, args: args, guest: gc.Name}
		if gc.Systemd {
			img.systemd = sysroots[gc.Udev]
		}
		if err := writeInitramfs(g.initrd, img); err != nil {
			return nil, err
		}
		guests = append(guests, g)
	}
	return guests, nil
}

func createSparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("vmtest: disk %s: %w", path, err)
	}
	return f.Close()
}

// skipReason finds the message the guest's test printed when it skipped:
// the indented log lines next to "--- SKIP:" (go test -v prints them
// before the SKIP line when streaming, after it otherwise).
func skipReason(console []string) string {
	var reason []string
	indented := func(l string) bool { return strings.HasPrefix(l, "    ") && !strings.Contains(l, "--- ") }
	for i, l := range console {
		if !strings.Contains(l, "--- SKIP:") {
			continue
		}
		reason = reason[:0]
		start := i
		for start > 0 && indented(console[start-1]) {
			start--
		}
		for _, r := range console[start:i] {
			reason = append(reason, strings.TrimSpace(r))
		}
		for _, r := range console[i+1:] {
			if !indented(r) {
				break
			}
			reason = append(reason, strings.TrimSpace(r))
		}
	}
	if len(reason) == 0 {
		return "skipped in the guest (no reason printed)"
	}
	return strings.Join(reason, "; ")
}

// slotDir is where the slot locks live: machine-wide (/run/lock) so that
// test runs from several checkouts share the CPUs too, else the cache.
// FABRAID_VMTEST_SLOTDIR overrides.
func slotDir(cache string) string {
	if d := os.Getenv("FABRAID_VMTEST_SLOTDIR"); d != "" {
		return d
	}
	if st, err := os.Stat("/run/lock"); err == nil && st.IsDir() {
		d := "/run/lock/fabraid-vmtest-slots"
		if os.MkdirAll(d, 0o777) == nil {
			return d
		}
	}
	return filepath.Join(cache, "slots")
}

// acquireSlots takes n of the host's guest slots (one per CPU, or
// FABRAID_VMTEST_SLOTS), in index order so that processes never deadlock.
func acquireSlots(cache string, n int) (func(), error) {
	total := runtime.NumCPU()
	if s, err := strconv.Atoi(os.Getenv("FABRAID_VMTEST_SLOTS")); err == nil && s > 0 {
		total = s
	}
	n = min(max(n, 1), total)
	dir := slotDir(cache)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var releases []func()
	releaseAll := func() {
		for _, r := range releases {
			r()
		}
		releases = nil
	}
	// First any free slots without waiting: guests from several test
	// processes share the CPUs.
	for i := 0; i < total && len(releases) < n; i++ {
		if r, ok := tryLockFile(filepath.Join(dir, fmt.Sprintf("slot-%d", i))); ok {
			releases = append(releases, r)
		}
	}
	if len(releases) == n {
		return releaseAll, nil
	}
	releaseAll()
	// Then wait, in index order so waiters never deadlock.
	for i := 0; i < n; i++ {
		r, err := lockFile(filepath.Join(dir, fmt.Sprintf("slot-%d", i)))
		if err != nil {
			releaseAll()
			return nil, err
		}
		releases = append(releases, r)
	}
	return releaseAll, nil
}
