package backend

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Dir is where fabraidd looks for plugin binaries.
const Dir = "/usr/libexec/fabraid/plugins"

// pluginName is the key of the backend in go-plugin's plugin sets.
const pluginName = "backend"

// Handshake is the magic cookie every fabraid backend plugin checks; a
// binary run without it exits with a message instead of serving.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "FABRAID_BACKEND_PLUGIN",
	MagicCookieValue: "9f2c1d6e-fabraid-nvmeof-backend",
}

func versionedPlugins(impl Backend) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {pluginName: &GRPCPlugin{Impl: impl}},
	}
}

// Serve runs impl as a plugin (call it from a plugin binary's main). It
// returns when the host closes the plugin.
func Serve(impl Backend, log hclog.Logger) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versionedPlugins(impl),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           log,
	})
}

// Binary returns the path of the plugin binary of backend name in dir.
func Binary(dir, name string) string {
	return filepath.Join(dir, "fabraid-plugin-"+name)
}

// CheckBinary refuses a plugin binary that anybody but root (or the
// daemon's own user, for a daemon not run as root: tests) could have
// replaced: it must be a regular file (no symlink), executable by its
// owner, owned by uid 0 or os.Getuid() and not writable by group or others,
// and so must every directory above it (a directory with the sticky bit,
// like /tmp, may be writable by others: they cannot rename what is not
// theirs). Refusals say which path is wrong and why.
func CheckBinary(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("plugin %s: not an absolute path", path)
	}
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("plugin %s: not a regular file (%s); refusing to run it", path, st.Mode().Type())
	}
	if st.Mode().Perm()&0o100 == 0 {
		return fmt.Errorf("plugin %s: not executable by its owner", path)
	}
	if err := checkOwnerMode(path, st, false); err != nil {
		return err
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		dst, err := os.Lstat(dir)
		if err != nil {
			return fmt.Errorf("plugin %s: directory %s: %w", path, dir, err)
		}
		if dst.Mode()&os.ModeSymlink != 0 {
			if dst, err = os.Stat(dir); err != nil { // /lib -> usr/lib style links are root's
				return fmt.Errorf("plugin %s: directory %s: %w", path, dir, err)
			}
		}
		if err := checkOwnerMode(path+": directory "+dir, dst, true); err != nil {
			return err
		}
		if dir == "/" {
			return nil
		}
	}
}

// checkOwnerMode refuses st unless it is owned by root or the daemon's user
// and not writable by group or others (sticky directories excepted from
// the mode check only).
func checkOwnerMode(what string, st os.FileInfo, dir bool) error {
	sticky := dir && st.Mode()&os.ModeSticky != 0
	if st.Mode().Perm()&0o022 != 0 && !sticky {
		return fmt.Errorf("plugin %s: mode %v is writable by group or others; refusing to run it", what, st.Mode().Perm())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("plugin %s: owned by uid %d, want root (0) or %d; refusing to run it", what, sys.Uid, os.Getuid())
	}
	return nil
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Path string // plugin binary
	Args []string
	// Checksum, when set, is the binary's SHA-256 (go-plugin SecureConfig).
	Checksum []byte
	// Logger receives the plugin's log lines (go-plugin forwards its
	// stderr). Nil discards them.
	Logger hclog.Logger
	// Versions the host accepts; nil means {ProtocolVersion}.
	Versions []int
}

// Runner runs one backend plugin, restarting it after it died. Calls go to
// the running plugin; a call that fails because the plugin died returns
// ErrTransient and the next call starts a new plugin process.
type Runner struct {
	cfg    RunnerConfig
	mu     sync.Mutex
	client *plugin.Client
	be     Backend
	starts int
	closed bool // Close ran: no plugin starts again
}

// ErrClosed is returned by calls on a Runner after Close: a caller still
// running when its daemon stops must not start a plugin nobody will stop.
var ErrClosed = errors.New("backend plugin runner closed")

// NewRunner checks the binary and returns a Runner that starts it on first use.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if err := CheckBinary(cfg.Path); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if len(cfg.Versions) == 0 {
		cfg.Versions = []int{ProtocolVersion}
	}
	return &Runner{cfg: cfg}, nil
}

// Starts reports how many plugin processes were started so far.
func (h *Runner) Starts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts
}

// Pid returns the running plugin's process id, 0 when none runs.
func (h *Runner) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client == nil || h.client.Exited() {
		return 0
	}
	if rc := h.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Backend returns the running plugin's Backend, starting (or restarting
// a dead) plugin first.
func (h *Runner) Backend() (Backend, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.client != nil && !h.client.Exited() {
		return h.be, nil
	}
	if h.client != nil {
		h.client.Kill()
		h.client = nil
	}
	if err := CheckBinary(h.cfg.Path); err != nil {
		return nil, err
	}
	vp := map[int]plugin.PluginSet{}
	for _, v := range h.cfg.Versions {
		vp[v] = plugin.PluginSet{pluginName: &GRPCPlugin{}}
	}
	cc := &plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: vp,
		Cmd:              exec.Command(h.cfg.Path, h.cfg.Args...),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           h.cfg.Logger,
		SyncStdout:       io.Discard,
		SyncStderr:       io.Discard,
	}
	if len(h.cfg.Checksum) > 0 {
		cc.SecureConfig = &plugin.SecureConfig{Checksum: h.cfg.Checksum, Hash: sha256.New()}
	}
	c := plugin.NewClient(cc)
	h.starts++
	rpc, err := c.Client()
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("start backend plugin %s: %w", h.cfg.Path, explainStart(err))
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("start backend plugin %s: %w", h.cfg.Path, err)
	}
	h.client, h.be = c, raw.(Backend)
	return h.be, nil
}

// explainStart makes go-plugin's handshake failures say what to do.
func explainStart(err error) error {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "incompatible api version"), strings.Contains(msg, "protocol version"):
		return fmt.Errorf("%w (fabraidd speaks backend protocol %d; install a matching plugin)", err, ProtocolVersion)
	case strings.Contains(msg, "unrecognized remote plugin message"), strings.Contains(msg, "exited before we could connect"):
		return fmt.Errorf("%w (not a fabraid backend plugin, or it failed the magic cookie handshake)", err)
	}
	return err
}

// Do runs fn on the plugin's Backend. When the call fails and the plugin
// has died meanwhile, the error is ErrTransient (the next Do restarts it).
func (h *Runner) Do(fn func(Backend) error) error {
	be, err := h.Backend()
	if errors.Is(err, ErrClosed) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTransient, &startError{err})
	}
	err = fn(be)
	if errors.Is(err, errConnection) {
		// go-plugin notices the exit asynchronously: drop the client now
		// so the next call starts a new plugin.
		h.drop()
	}
	return err
}

// Close stops the plugin process (the exports stay in the target); later
// calls return ErrClosed instead of starting another one.
func (h *Runner) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.killLocked()
}

// drop stops the plugin process; the next call starts a new one.
func (h *Runner) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.killLocked()
}

func (h *Runner) killLocked() {
	if h.client != nil {
		h.client.Kill()
		h.client = nil
	}
}

var _ Backend = (*Runner)(nil)

// startError marks a Do that failed to start the plugin.
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// call runs fn on the plugin and, when the plugin died during the call (or
// while it was being started), once more on a restarted plugin: every
// Backend method is idempotent and a restarted plugin derives everything
// from the target's actual state, so the second run finishes what the
// first one started. A plugin that cannot start at all fails twice.
func (h *Runner) call(fn func(Backend) error) error {
	err := h.Do(fn)
	var se *startError
	if errors.Is(err, errConnection) || errors.As(err, &se) {
		h.cfg.Logger.Warn("backend plugin died or failed to start; restarting it", "plugin", h.cfg.Path, "error", err)
		err = h.Do(fn)
	}
	return err
}

// Features implements Backend on the running plugin.
func (h *Runner) Features(ctx context.Context) (f Features, err error) {
	err = h.call(func(b Backend) error { f, err = b.Features(ctx); return err })
	return f, err
}

// Apply implements Backend on the running plugin.
func (h *Runner) Apply(ctx context.Context, req ApplyRequest) (res ApplyResult, err error) {
	err = h.call(func(b Backend) error { res, err = b.Apply(ctx, req); return err })
	return res, err
}

// List implements Backend on the running plugin.
func (h *Runner) List(ctx context.Context, scope string) (ex []Export, err error) {
	err = h.call(func(b Backend) error { ex, err = b.List(ctx, scope); return err })
	return ex, err
}

// SetANAState implements Backend on the running plugin.
func (h *Runner) SetANAState(ctx context.Context, req ANARequest) error {
	return h.call(func(b Backend) error { return b.SetANAState(ctx, req) })
}

// Remove implements Backend on the running plugin.
func (h *Runner) Remove(ctx context.Context, nqn string) error {
	return h.call(func(b Backend) error { return b.Remove(ctx, nqn) })
}
