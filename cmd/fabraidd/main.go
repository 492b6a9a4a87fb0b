// Command fabraidd is the fabraid node daemon: it assembles the node's
// volumes from the claimed drives, serves each through a supervised engine
// process (ublk), exports it over NVMe/TCP, connects the node to it, and
// answers the fabraid CLI on a root-only unix socket. See
// docs/admin-guide.md and package internal/daemon.
//
//	fabraidd [--config /etc/fabraid/fabraid.conf]
//	fabraidd engine --volume NAME [--config PATH]                        (systemd unit fabraid-engine@NAME)
//	fabraidd engine --uuid U --members A,B,... --ublk-id N --socket S [--owner-domain D] [--epoch E]   (child process of fabraidd)
//
// Exit codes: 0 stopped by SIGINT/SIGTERM, 1 failed, 2 bad usage or
// configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/daemon"
	"github.com/fabraid/fabraid/internal/logging"
	"github.com/fabraid/fabraid/internal/manpage"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/kernel/sched"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

type usageError struct{ error }

func main() {
	log := logging.New(os.Stderr, logging.Options{})
	err := newRootCmd(log).Execute()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "fabraidd:", err)
	var ue usageError
	if errors.As(err, &ue) {
		os.Exit(2)
	}
	os.Exit(1)
}

func newRootCmd(log *slog.Logger) *cobra.Command {
	var cfgPath string
	root := &cobra.Command{
		Use:           "fabraidd",
		Short:         "The fabraid node daemon",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig(cmd, cfgPath)
			if err != nil {
				return usageError{err}
			}
			for _, w := range c.Warnings { // unknown keys: skipped, not fatal (internal/config)
				log.Warn("configuration line ignored", "err", w)
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			boostControlPlane(log)
			d, err := daemon.New(daemon.Options{Config: c, Version: version, Log: log, EngineBinary: self})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return d.Run(ctx)
		},
	}
	root.Flags().StringVar(&cfgPath, "config", config.DefaultPath, "configuration file")
	root.AddCommand(newEngineCmd(log), manpage.Command("8", "fabraidd "+version))
	return root
}

func newEngineCmd(log *slog.Logger) *cobra.Command {
	var uuid, members, socket, volume, cfgPath, ownerDomain string
	var ublkID, queues int
	var epoch uint64
	var noZeroCopy bool
	var busyRate int64
	cmd := &cobra.Command{
		Use: "engine (--volume NAME [--config PATH] | --uuid U --members A,B,... --ublk-id N --socket PATH)",
		Short: "Serve one volume's engine (run by fabraidd: a systemd unit fabraid-engine@NAME with --volume, " +
			"a child process otherwise)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if volume != "" {
				return serveUnit(ctx, cmd, volume, cfgPath, log)
			}
			if members == "" || socket == "" {
				return usageError{errors.New("--volume, or --members and --socket, are required")}
			}
			dropControlPlaneBoost(log)
			return volmgr.ServeEngine(ctx, volmgr.ServeOptions{Members: strings.Split(members, ","), UblkID: ublkID, Socket: socket,
				OwnerDomain: ownerDomain, Epoch: epoch, Queues: queues, NoZeroCopy: noZeroCopy, RebuildBusyRate: busyRate, Version: version, Log: log.With("engine", uuid, "pid", os.Getpid())})
		},
	}
	f := cmd.Flags()
	f.StringVar(&volume, "volume", "", "volume name: read <run dir>/engines/NAME.json (systemd unit mode)")
	f.StringVar(&cfgPath, "config", config.DefaultPath, "configuration file (with --volume: where the run dir is)")
	f.StringVar(&uuid, "uuid", "", "volume UUID (for logs)")
	f.StringVar(&members, "members", "", "member devices, comma-separated")
	f.IntVar(&ublkID, "ublk-id", -1, "ublk device to re-attach (user recovery) or create; -1: any")
	f.StringVar(&socket, "socket", "", "control socket")
	f.StringVar(&ownerDomain, "owner-domain", "", "failure domain of this node: journal the data chunks on its members (owner-domain journaling); empty: off")
	f.Uint64Var(&epoch, "epoch", 0, "owner epoch of the assembly (the cluster's owner key); 0: one more than on disk")
	f.IntVar(&queues, "queues", 0, "ublk queues (0: one per CPU the engine may run on)")
	f.BoolVar(&noZeroCopy, "no-zero-copy", false, "keep the ublk copy path where the kernel offers zero copy (AUTO_BUF_REG)")
	f.Int64Var(&busyRate, "rebuild-busy-rate", 0, "bytes per second of rebuilds and scrubs while the volume serves foreground I/O (rebuild_busy_rate); 0: no such pacing")
	return cmd
}

// serveUnit serves volume as the main process of its systemd unit: the
// spec file written by fabraidd says what to serve and is kept current;
// READY=1 goes to systemd once the socket answers. A missing spec is a
// usage error (exit 2: the unit does not restart, see
// RestartPreventExitStatus).
func serveUnit(ctx context.Context, cmd *cobra.Command, volume, cfgPath string, log *slog.Logger) error {
	c, err := loadConfig(cmd, cfgPath)
	if err != nil {
		return usageError{err}
	}
	path := volmgr.SpecPath(filepath.Dir(c.APISocket), volume)
	spec, err := volmgr.ReadSpec(path)
	if err != nil {
		return usageError{fmt.Errorf("volume %s: %w (written by fabraidd before it starts the unit)", volume, err)}
	}
	log = log.With("engine", spec.UUID, "pid", os.Getpid())
	sddaemon.SdNotify(false, "STATUS=assembling "+volume)
	defer sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	err = volmgr.ServeEngine(ctx, volmgr.ServeOptions{
		Members: spec.Members, UblkID: spec.UblkID, Socket: spec.Socket, SpecPath: path, OwnerDomain: spec.OwnerDomain, Epoch: spec.Epoch, NoZeroCopy: spec.NoZeroCopy,
		RebuildBusyRate: spec.RebuildBusyRate, Log: log, Version: version,
		Ready: func(ublkPath string) {
			sddaemon.SdNotify(false, sddaemon.SdNotifyReady+"\nSTATUS=serving "+volume+" on "+ublkPath)
		},
	})
	if err != nil {
		log.Error("engine failed", "volume", volume, "err", err) // an error entry in the journal, with its fields
	}
	return err
}

// loadConfig reads the configuration: the file given with --config must
// exist; the default path may be missing (defaults).
func loadConfig(cmd *cobra.Command, path string) (config.Config, error) {
	if cmd.Flags().Changed("config") {
		return config.Load(path)
	}
	return config.LoadOrDefault(path)
}

// controlBoost is how much nicer than its engines fabraidd runs: its etcd
// member and its owner lease keepalives must be answered on time while an
// engine of the same node computes parity (a late keepalive freezes every
// engine of the node: docs/cluster.md, "Timing"), and they use little CPU.
const controlBoost = 5

// engineNiceEnv carries the nice value fabraidd had before its boost to
// its child engines, which go back to it (dropControlPlaneBoost).
const engineNiceEnv = "FABRAID_ENGINE_NICE"

// boostControlPlane lowers fabraidd's nice value by controlBoost (every
// thread: package sched); without CAP_SYS_NICE it stays as it is.
func boostControlPlane(log *slog.Logger) {
	n, err := sched.Nice()
	if err != nil {
		log.Warn("cannot read the nice value", "err", err)
		return
	}
	if err := sched.Renice(max(n-controlBoost, -20)); err != nil {
		log.Warn("cannot raise fabraidd's CPU priority over its engines'", "err", err)
		return
	}
	os.Setenv(engineNiceEnv, strconv.Itoa(n))
}

// dropControlPlaneBoost puts a child engine back at the nice value
// fabraidd had before its boost.
func dropControlPlaneBoost(log *slog.Logger) {
	v := os.Getenv(engineNiceEnv)
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	if err == nil {
		err = sched.Renice(n)
	}
	if err != nil {
		log.Warn("engine: cannot drop fabraidd's CPU priority", engineNiceEnv, v, "err", err)
	}
}
