package volmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/unixjson"
	"github.com/fabraid/fabraid/internal/unixsock"
	"github.com/fabraid/fabraid/internal/volid"
)

// Engine child processes
//
// With ChildStarter every volume's engine runs in its own process
// ("fabraidd engine ..."), which serves the ublk device and answers a small
// JSON protocol on a unix socket <runDir>/engine-<uuid>.sock (mode 0600).
// The daemon supervises it: when the child exits unexpectedly (crash,
// SIGKILL) the next reconcile starts a new one, which re-attaches to the
// same ublk device with user recovery; consumers see a pause. Children
// outlive a daemon restart and are adopted by the next daemon through their
// socket.

// EngineSocket is the control socket path of a volume's engine.
func EngineSocket(runDir string, u [16]byte) string {
	return filepath.Join(runDir, "engine-"+volid.Format(u)+".sock")
}

type engineReq struct {
	Slot   int    `json:"slot"`
	Epoch  uint64 `json:"epoch,omitempty"`
	Path   string `json:"path,omitempty"`
	Rate   int64  `json:"rate,omitempty"`
	Repair bool   `json:"repair,omitempty"`
	Force  bool   `json:"force,omitempty"`
}

// ServeOptions configure ServeEngine.
type ServeOptions struct {
	Members []string // member device paths
	UblkID  int      // device to re-attach (user recovery) or create; ublk.AnyID: any
	Socket  string   // control socket
	// SpecPath, when set, is the engine spec file (unit mode): members
	// whose device node is gone are left out before assembly, and the file
	// is kept current (the ublk id once the device exists, the member list
	// after a replace), so a restart by systemd serves the same device.
	SpecPath string
	// OwnerDomain is engine.Options.OwnerDomain ("" off).
	OwnerDomain string
	// Epoch is engine.Options.Epoch (0: one more than on disk).
	Epoch uint64
	// Queues is the number of ublk queues (0: one per CPU this process may
	// run on).
	Queues int
	// NoZeroCopy keeps the ublk copy path where the kernel offers zero
	// copy (LocalOptions.NoZeroCopy).
	NoZeroCopy bool
	// RebuildBusyRate is LocalOptions.RebuildBusyRate.
	RebuildBusyRate int64
	// Ready, when set, is called once the socket answers.
	Ready func(ublkPath string)
	Log   *slog.Logger
	// Version is the binary version the engine reports (EngineVersion).
	Version string
}

// servedEngine is what the engine socket serves.
type servedEngine interface {
	Engine
	memberRemover
}

// engineMux serves the engine protocol (engineproto.go) for e: stop is
// called on a stop request, changed after the member list changed.
func engineMux(e servedEngine, version string, stop, changed func()) *http.ServeMux {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrBusy) {
				code = http.StatusConflict
			}
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		reply(w, EngineVersion{Protocol: EngineProtocol, MinProtocol: EngineProtocolMin, Version: version, PID: pid()}, nil)
	})
	handleVersions(mux, "GET", "/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := e.Status()
		reply(w, st, err)
	})
	// Requests decode with unknown fields ignored: a newer daemon's
	// additions do not break an older engine.
	post := func(path string, f func(engineReq) error) {
		handleVersions(mux, "POST", path, func(w http.ResponseWriter, r *http.Request) {
			var q engineReq
			if err := json.NewDecoder(r.Body).Decode(&q); err != nil && err != io.EOF {
				reply(w, nil, err)
				return
			}
			reply(w, map[string]bool{"ok": true}, f(q))
		})
	}
	post("/fail", func(q engineReq) error { return e.Fail(q.Slot, q.Force) })
	post("/removed", func(q engineReq) error {
		err := e.Removed(q.Slot)
		changed()
		return err
	})
	post("/readd", func(q engineReq) error {
		err := e.ReAdd(q.Slot, q.Path, q.Rate)
		if err == nil {
			changed()
		}
		return err
	})
	post("/replace", func(q engineReq) error {
		err := e.Replace(q.Slot, q.Path, q.Rate)
		if err == nil {
			changed()
		}
		return err
	})
	post("/rebuild", func(q engineReq) error { return e.Rebuild(q.Rate) })
	post("/scrub", func(q engineReq) error { return e.Scrub(q.Repair, q.Rate) })
	post("/flush", func(engineReq) error { return e.Flush() })
	post("/freeze", func(engineReq) error { return e.Freeze() })
	post("/handoff", func(engineReq) error { return e.HandOff() })
	post("/thaw", func(q engineReq) error {
		err := e.Thaw(q.Epoch)
		if err == nil {
			changed()
		}
		return err
	})
	post("/stop", func(engineReq) error {
		stop()
		return nil
	})
	// Profiles of the engine process (the socket is root-only):
	// go tool pprof over the socket, e.g. curl --unix-socket S
	// http://engine/debug/pprof/profile?seconds=10 > cpu.pprof.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	return mux
}

// ServeEngine assembles the volume from o.Members, serves it as a ublk
// device and answers the engine protocol on o.Socket until ctx ends or a
// stop request comes; then it stops the device and closes the volume
// cleanly.
func ServeEngine(ctx context.Context, o ServeOptions) error {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	members := o.Members
	if o.SpecPath != "" {
		members = presentMembers(members, log)
	}
	exec := newExecutor(log)
	vol, err := assemble(members, o.OwnerDomain, o.Epoch, exec, log)
	if err != nil {
		closeExecutor(exec)
		return fmt.Errorf("assemble: %w", err)
	}
	l, err := StartLocal(vol, o.UblkID, log, LocalOptions{Executor: exec, Queues: o.Queues, NoZeroCopy: o.NoZeroCopy,
		RebuildBusyRate: o.RebuildBusyRate})
	if err != nil {
		vol.Close()
		closeExecutor(exec)
		return err
	}
	saveSpec := func(f func(*SpecFile)) {
		if o.SpecPath == "" {
			return
		}
		if err := UpdateSpec(o.SpecPath, f); err != nil {
			log.Error("cannot update the engine spec; a restart may not find the current state", "err", err)
		}
	}
	saveSpec(func(s *SpecFile) { s.UblkID = l.Device().ID(); s.Members = specMembers(vol.Status()) })
	socket := o.Socket
	ln, err := unixsock.Listen(socket, 0o600)
	if err != nil {
		l.Stop()
		return fmt.Errorf("engine socket: %w", err)
	}
	stop := make(chan struct{}, 1)
	mux := engineMux(l, o.Version, func() {
		select {
		case stop <- struct{}{}:
		default:
		}
	}, func() {
		saveSpec(func(s *SpecFile) { s.Members, s.Epoch = specMembers(vol.Status()), vol.Status().Epoch })
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	log.Info("engine serving", "volume", vol.Name(), "ublk", l.Device().BlockPath(), "socket", socket)
	if o.Ready != nil {
		o.Ready(l.Device().BlockPath())
	}
	select {
	case <-ctx.Done():
	case <-stop:
	case <-l.Device().Done():
		log.Error("ublk device stopped from outside", "volume", vol.Name())
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	srv.Shutdown(sctx)
	cancel()
	os.Remove(socket)
	return l.Stop()
}

// childEnv is the daemon's environment without systemd's per-service
// variables: a child must not send notifications on the daemon's behalf
// (systemd would log them as refused, or take them for the daemon's). An
// engine runs with EngineGODEBUG added to GODEBUG.
func childEnv(env []string) []string {
	var out []string
	godebug := EngineGODEBUG
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES":
			continue
		case "GODEBUG":
			if v != "" {
				godebug = v + "," + EngineGODEBUG // the last setting wins
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GODEBUG="+godebug)
}

// EngineGODEBUG is the Go runtime setting an engine runs with (the engine
// unit sets it too): no signal-based preemption. The parity and CRC loops
// run for milliseconds (tens of them under emulation), and sysmon's
// preemption signals cost 3-20 % of a writing engine's CPU in the cluster
// benchmark's profiles (runtime.asyncPreempt); the engine's goroutines
// reach a cooperative preemption point at every call between chunks, and
// none spins without calls.
const EngineGODEBUG = "asyncpreemptoff=1"

// presentMembers leaves out member paths whose device node is gone (a
// pulled drive): assembly decides whether the others suffice.
func presentMembers(paths []string, log *slog.Logger) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			log.Warn("member device gone; assembling without it", "member", p, "err", err)
			continue
		}
		out = append(out, p)
	}
	return out
}

// specMembers is the member list a restart should assemble from: the
// devices of the members that are not failed.
func specMembers(st engine.Status) []string {
	var out []string
	for _, m := range st.Members {
		if m.Device != "" && m.Role != superblock.RoleFailed {
			out = append(out, m.Device)
		}
	}
	return out
}

// child is an Engine in another process, reached through its socket with
// the negotiated protocol (engineproto.go).
type child struct {
	uc    *unixjson.Client
	proto *engineProto
}

func newChild(socket string) *child {
	return newChildProto(socket, daemonProtocols, func(ev EngineVersion) string {
		if ev.PID > 0 {
			return fmt.Sprintf("`kill %d` (the daemon starts a new one)", ev.PID)
		}
		return "a restart of its process (the daemon starts a new one)"
	})
}

func newChildProto(socket string, r protoRange, restart func(EngineVersion) string) *child {
	return &child{uc: unixjson.New(socket, "engine", engineCallTimeout), proto: &engineProto{r: r, restart: restart}}
}

func (c *child) call(method, path string, in, out any) error {
	timeout := engineCallTimeout
	if method == "GET" {
		timeout = engineStatusTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := c.proto.path(ctx, c.uc, path)
	if err == nil {
		err = c.uc.DoContext(ctx, method, p, in, out)
	}
	var se *unixjson.StatusError
	switch {
	case errors.Is(err, unixjson.ErrUnreachable):
		c.proto.reset()
		return fmt.Errorf("engine: %w", err)
	case errors.As(err, &se) && se.Status == http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrBusy, se.Message)
	}
	return err
}

func (c *child) Status() (EngineStatus, error) {
	var st EngineStatus
	err := c.call("GET", "/status", nil, &st)
	return st, err
}
func (c *child) Fail(slot int, force bool) error {
	return c.call("POST", "/fail", engineReq{Slot: slot, Force: force}, nil)
}
func (c *child) ReAdd(slot int, path string, rate int64) error {
	return c.call("POST", "/readd", engineReq{Slot: slot, Path: path, Rate: rate}, nil)
}
func (c *child) Replace(slot int, path string, rate int64) error {
	return c.call("POST", "/replace", engineReq{Slot: slot, Path: path, Rate: rate}, nil)
}
func (c *child) Rebuild(rate int64) error {
	return c.call("POST", "/rebuild", engineReq{Rate: rate}, nil)
}
func (c *child) Scrub(repair bool, rate int64) error {
	return c.call("POST", "/scrub", engineReq{Repair: repair, Rate: rate}, nil)
}
func (c *child) Flush() error   { return c.call("POST", "/flush", engineReq{}, nil) }
func (c *child) Freeze() error  { return c.call("POST", "/freeze", engineReq{}, nil) }
func (c *child) HandOff() error { return c.call("POST", "/handoff", engineReq{}, nil) }
func (c *child) Thaw(epoch uint64) error {
	return c.call("POST", "/thaw", engineReq{Epoch: epoch}, nil)
}

// Stop asks the child to stop cleanly and waits until its process is gone.
func (c *child) Stop() error {
	st, serr := c.Status()
	if err := c.call("POST", "/stop", engineReq{}, nil); err != nil {
		return err
	}
	if serr != nil {
		return nil
	}
	for i := 0; i < 300; i++ {
		if err := syscall.Kill(st.PID, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.PID)); err == nil && strings.Contains(string(b), ") Z ") {
			return nil // exited, waiting to be reaped by the supervisor
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("engine pid %d did not stop within 30s", st.PID)
}

// childArgs is the command line of s's engine child after the binary;
// --owner-domain, --epoch, --no-zero-copy and --rebuild-busy-rate only
// when set, so that the command line of an engine without them is what an
// older daemon ran.
func childArgs(s EngineSpec, sock string) []string {
	args := []string{"engine", "--uuid", volid.Format(s.UUID), "--members", strings.Join(s.Members, ","),
		"--ublk-id", strconv.Itoa(s.UblkID), "--socket", sock}
	if s.OwnerDomain != "" {
		args = append(args, "--owner-domain", s.OwnerDomain)
	}
	if s.Epoch != 0 {
		args = append(args, "--epoch", strconv.FormatUint(s.Epoch, 10))
	}
	if s.NoZeroCopy {
		args = append(args, "--no-zero-copy")
	}
	if s.RebuildBusyRate > 0 {
		args = append(args, "--rebuild-busy-rate", strconv.FormatInt(s.RebuildBusyRate, 10))
	}
	return args
}

// ChildStarter starts engines as child processes of binary ("fabraidd"),
// run as "binary engine --uuid U --members a,b --ublk-id N --socket S
// [--owner-domain D]". A child already serving the volume (its socket
// answers with this UUID) is adopted. onExit is called when a child started here exits.
func ChildStarter(binary, runDir string, log *slog.Logger, onExit func(u [16]byte, e Engine, err error)) StartFunc {
	return func(ctx context.Context, s EngineSpec) (Engine, error) {
		sock := EngineSocket(runDir, s.UUID)
		c := newChild(sock)
		st, err := c.Status()
		if err == nil && st.Engine.UUID == s.UUID {
			log.Info("adopted running engine", "volume", s.Name, "pid", st.PID, "ublk", st.UblkPath)
			return c, nil
		}
		if errors.Is(err, ErrEngineProtocol) {
			// It serves the volume, in a protocol we cannot speak: a
			// second engine would not get the ublk device.
			return nil, fmt.Errorf("volume %s: %w", s.Name, err)
		}
		if err := os.MkdirAll(runDir, 0o700); err != nil {
			return nil, err
		}
		cmd := exec.Command(binary, childArgs(s, sock)...)
		// Logs go to a file, not a pipe: a child writing to a pipe whose
		// reader (a previous daemon) is gone would die of SIGPIPE.
		logPath := strings.TrimSuffix(sock, ".sock") + ".log"
		logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("engine log: %w", err)
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = childEnv(os.Environ())
		stderr := func() string {
			b, _ := os.ReadFile(logPath)
			if len(b) > 2048 {
				b = b[len(b)-2048:]
			}
			return strings.TrimSpace(string(b))
		}
		// Its own process group: a terminal's ^C or a signal to the daemon's
		// group does not stop the volume.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start engine for %s: %w", s.Name, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.After(120 * time.Second)
		for {
			select {
			case err := <-exited:
				return nil, fmt.Errorf("engine for %s exited: %v: %s", s.Name, err, stderr())
			case <-deadline:
				cmd.Process.Kill()
				return nil, fmt.Errorf("engine for %s: no answer on %s within 120s", s.Name, sock)
			case <-time.After(100 * time.Millisecond):
			}
			if st, err := c.Status(); err == nil && st.Engine.UUID == s.UUID {
				log.Info("engine started", "volume", s.Name, "pid", st.PID, "ublk", st.UblkPath)
				go func() {
					err := <-exited
					log.Warn("engine exited", "volume", s.Name, "pid", st.PID, "err", err)
					if onExit != nil {
						onExit(s.UUID, c, err)
					}
				}()
				return c, nil
			}
		}
	}
}
