package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster"
	"github.com/fabraid/fabraid/internal/clusterplane"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/fabraid/fabraid/internal/unixsock"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/ublk"
	"github.com/fabraid/fabraid/plugins/backend"
)

// Options configure the daemon.
type Options struct {
	Config  config.Config
	Version string
	Log     *slog.Logger
	// EngineBinary is the executable run as "EngineBinary engine ..." for
	// each volume (normally fabraidd itself, os.Executable()).
	EngineBinary string
	// RunDir holds the engine sockets; default the API socket's directory.
	RunDir   string
	Interval time.Duration // reconcile period; default 10 s
	HostDir  string        // host NQN/ID directory; default /etc/nvme
	// PluginDir is where target backend plugins are found; default
	// /usr/libexec/fabraid/plugins (backend.Dir). For tests.
	PluginDir string
}

// Daemon is a running fabraidd.
type Daemon struct {
	opts Options
	log  *slog.Logger
	mgr  *volmgr.Manager
	// cluster is the node's cluster membership; in no cluster it runs
	// nothing and the node is a one-node system.
	cluster *cluster.Node
	// plane is the cluster data plane (package clusterplane); the volume
	// API goes to it while the node is in a cluster (volumes()).
	plane *clusterplane.Plane
	// local is the one-node volume API over mgr.
	local *localVolumes
	// heads re-triggers volume heads that missed their name link
	// (headnames.go); only the run loop uses it.
	heads  *headNamer
	kick   chan struct{}
	errors atomic.Int64
	status atomic.Value // string
	mode   string       // config.EngineSystemd or config.EngineProcess
	// plugin runs the target backend plugin; nil: the kernel backend runs
	// in this process.
	plugin *backend.Runner
}

// New prepares the daemon; nothing runs until Run.
func New(o Options) (*Daemon, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Interval == 0 {
		o.Interval = 10 * time.Second
	}
	if o.RunDir == "" {
		o.RunDir = filepath.Dir(o.Config.APISocket)
	}
	d := &Daemon{opts: o, log: o.Log, kick: make(chan struct{}, 1), heads: newHeadNamer(o.Log)}
	start, err := d.starter()
	if err != nil {
		return nil, err
	}
	if d.plugin, err = d.targetBackend(); err != nil {
		return nil, err
	}
	mo := volmgr.Options{Config: o.Config, Drives: drive.System(o.Config.StateDir), Log: o.Log, Start: start, HostDir: o.HostDir, Kick: d.Kick}
	if d.plugin != nil {
		// Volume and drive exports share the plugin (separate scopes).
		mo.Target = d.plugin
	}
	mgr, err := volmgr.New(mo)
	if err != nil {
		d.closePlugin()
		return nil, err
	}
	d.mgr, d.local = mgr, &localVolumes{mgr: mgr, kick: d.Kick}
	if d.cluster, err = d.newCluster(); err != nil {
		return nil, err
	}
	po := clusterplane.Options{Config: o.Config, Log: o.Log, Manager: mgr, Node: d.cluster, Kick: d.Kick}
	if d.plugin != nil {
		po.Target = d.plugin // drive exports share the plugin with volume exports
	}
	d.plane = clusterplane.New(po)
	return d, nil
}

// starter picks how engines run (config engine_mode, see
// volmgr.ChooseEngineMode): systemd units over D-Bus, or child processes
// of this daemon, restarted by it when they exit.
func (d *Daemon) starter() (volmgr.StartFunc, error) {
	o := d.opts
	var probe volmgr.SystemdProbe
	if o.Config.EngineMode != config.EngineProcess {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		probe = volmgr.ProbeSystemd(ctx)
		cancel()
	}
	mode, warn, err := volmgr.ChooseEngineMode(o.Config.EngineMode, probe)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		d.log.Warn(warn)
	}
	d.mode = mode
	if mode == config.EngineSystemd {
		return volmgr.SystemdStarter(o.RunDir, o.Log), nil
	}
	return volmgr.ChildStarter(o.EngineBinary, o.RunDir, o.Log, func(u [16]byte, e volmgr.Engine, err error) {
		d.mgr.Forget(u, e)
		d.Kick()
	}), nil
}

// closePlugin stops the backend plugin process; the exports stay in the
// target.
func (d *Daemon) closePlugin() {
	if d.plugin != nil {
		d.plugin.Close()
	}
}

// EngineMode is how engines run: config.EngineSystemd or
// config.EngineProcess.
func (d *Daemon) EngineMode() string { return d.mode }

// Kick asks for a reconcile soon.
func (d *Daemon) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *Daemon) reconcile(ctx context.Context) {
	vs := d.volumes()
	if err := vs.Reconcile(ctx); errors.Is(err, clusterplane.ErrNoEtcd) {
		d.log.Info("cluster: waiting for etcd before reconciling volumes")
	} else if err != nil {
		d.errors.Add(1)
		d.log.Error(reconcileMessage(vs), "err", err)
	}
	if err := d.cluster.Refresh(ctx); err != nil {
		d.log.Warn("cluster: cannot update this node's registry record", "err", err)
	}
	counts := map[string]int{}
	vols := d.mgr.List()
	for _, v := range vols {
		counts[v.State]++
	}
	var parts []string
	for _, s := range volumeStates {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	st := fmt.Sprintf("%d volume(s)", len(vols))
	if len(parts) > 0 {
		st += ": " + strings.Join(parts, ", ")
	}
	d.status.Store(st)
	sddaemon.SdNotify(false, "STATUS="+st)
}

// Run serves until ctx ends. Engines keep running after Run returns (a
// restarted daemon adopts them); use "fabraid volume delete" to stop one.
func (d *Daemon) Run(ctx context.Context) error {
	c := d.opts.Config
	if _, err := ublk.OpenControl(); err != nil {
		d.log.Warn("ublk unavailable; volumes cannot start", "err", err)
	}
	if err := os.MkdirAll(filepath.Dir(c.APISocket), 0o700); err != nil {
		return fmt.Errorf("api socket dir: %w", err)
	}
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	ln, err := unixsock.Listen(c.APISocket, 0o600)
	if err != nil {
		return fmt.Errorf("api socket: %w", err)
	}
	defer ln.Close()

	if c.MetricsAddress != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(&collector{d: d})
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mln, err := net.Listen("tcp", c.MetricsAddress)
		if err != nil {
			return fmt.Errorf("metrics address %s: %w", c.MetricsAddress, err)
		}
		msrv := &http.Server{Handler: mux}
		go msrv.Serve(mln)
		defer msrv.Close()
	}
	defer d.closePlugin()
	d.log.Info("fabraidd starting", "node", c.NodeName, "engines", d.mode, "target_backend", c.TargetBackend, "socket", c.APISocket, "metrics", c.MetricsAddress, "hostnqn", d.mgr.HostNQN())
	// The API answers once the first reconcile has adopted or started the
	// volumes, so the CLI never sees a half-known node.
	d.reconcile(ctx)
	go d.startCluster(ctx)
	defer d.cluster.Close()
	defer func() {
		// Before the cluster client goes: freeze the engines and revoke
		// the owner lease (another node may take the volumes over).
		cctx, cancel := context.WithTimeout(context.Background(), cluster.RevokeTimeout)
		d.plane.Close(cctx)
		cancel()
	}()
	apiSrv := &http.Server{Handler: d.Handler()}
	go apiSrv.Serve(ln)
	defer apiSrv.Close()
	sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
	d.log.Info("fabraidd ready", "status", d.status.Load())

	var wd <-chan time.Time
	if iv, err := sddaemon.SdWatchdogEnabled(false); err == nil && iv > 0 {
		t := time.NewTicker(iv / 2)
		defer t.Stop()
		wd = t.C
	}
	tick := time.NewTicker(d.opts.Interval)
	defer tick.Stop()
	d.Kick() // a reconcile now that the API answers: it re-triggers heads that missed their names
	// Reconciles run one at a time in their own goroutine, so the
	// watchdog keeps being fed while one waits for an engine to start
	// (assembly and resync can take minutes); only a reconcile stuck for
	// longer than maxReconcile stops the pings.
	var (
		running time.Time // start of the running reconcile; zero: none
		again   bool      // a tick or kick came while one ran
		logged  bool      // the running reconcile's stacks were logged
		done    = make(chan struct{}, 1)
	)
	start := func() {
		running, logged = time.Now(), false
		go func() {
			d.reconcile(ctx)
			d.convergeHeadNames(ctx) // the API answers name lookups by now
			done <- struct{}{}
		}()
	}
	trigger := func() {
		if running.IsZero() {
			start()
		} else {
			again = true
		}
	}
	for {
		select {
		case <-ctx.Done():
			sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
			d.log.Info("fabraidd stopping; volumes keep running")
			if !running.IsZero() {
				// The running reconcile sees ctx cancelled; let it end
				// before the plugin, plane and cluster client close.
				select {
				case <-done:
				case <-time.After(stopWait):
					d.log.Warn("a reconcile still runs; stopping without it", "waited", stopWait.String())
				}
			}
			return nil
		case <-wd:
			if running.IsZero() || time.Since(running) < maxReconcile {
				sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
			} else {
				d.log.Error("reconcile stuck; not feeding the watchdog", "running_for", time.Since(running).String())
			}
		case <-done:
			running = time.Time{}
			if again {
				again = false
				start()
			}
		case <-tick.C:
			if !running.IsZero() && !logged && time.Since(running) >= stuckAfter {
				logged = true
				d.logStuck(time.Since(running))
			}
			trigger()
		case <-d.kick:
			trigger()
		}
	}
}

// maxReconcile is how long one reconcile may run before fabraidd stops
// feeding systemd's watchdog: longer than an engine start may take
// (volmgr waits up to 150 s for one), shorter than forever.
const maxReconcile = 10 * time.Minute

// stopWait is how long a stopping fabraidd waits for the reconcile that
// runs to end (it sees its context cancelled).
const stopWait = 15 * time.Second

// Handler is the API (see package api).
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(errorCode(err))
			enc := json.NewEncoder(w)
			enc.SetEscapeHTML(false)
			enc.Encode(map[string]string{"error": err.Error()})
			return
		}
		if v == nil {
			v = map[string]bool{"ok": true}
		}
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		enc.Encode(v)
	}
	decode := func(r *http.Request, v any) error {
		if err := json.NewDecoder(r.Body).Decode(v); err != nil {
			return fmt.Errorf("%w: %v", errBadRequest, err)
		}
		return nil
	}
	mux.HandleFunc("GET /v1/node", func(w http.ResponseWriter, r *http.Request) {
		reply(w, api.Node{Name: d.opts.Config.NodeName, HostNQN: d.mgr.HostNQN(), Version: d.opts.Version, PID: os.Getpid()}, nil)
	})
	d.clusterRoutes(mux, reply, decode) // membership.go
	d.udevRoutes(mux, reply, decode)
	d.volumeRoutes(mux, reply, decode) // volumes.go
	// Profiles of the daemon (the socket is root-only), as the engine's:
	// curl --unix-socket S http://fabraidd/debug/pprof/profile?seconds=10.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	return mux
}

// errBadRequest (400) is wrapped by refusals of a malformed request.
var errBadRequest = clusterplane.ErrBadRequest

// errorCode is the HTTP status of an API error (0 for nil): the owner's
// own status for a request the owner refused, else by the error's kind
// (clusterplane.ErrorCode).
func errorCode(err error) int {
	if errors.Is(err, errLocalVolumes) {
		return http.StatusConflict
	}
	return clusterplane.ErrorCode(err)
}
