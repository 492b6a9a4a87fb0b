// Command fabraidd is the fabraid node daemon: it assembles the node's
// volumes from the claimed drives, serves each through a supervised engine
// process (ublk), exports it over NVMe/TCP, connects the node to it, and
// answers the fabraid CLI on a root-only unix socket. See
// docs/admin-guide.md and package internal/daemon.
//
//	fabraidd [--config /etc/fabraid/fabraid.conf]
//	fabraidd engine --uuid U --members A,B,... --ublk-id N --socket S   (started by fabraidd)
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
	"strings"
	"syscall"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/daemon"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

type usageError struct{ error }

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
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
			var c config.Config
			var err error
			if cmd.Flags().Changed("config") {
				c, err = config.Load(cfgPath)
			} else {
				c, err = config.LoadOrDefault(cfgPath)
			}
			if err != nil {
				return usageError{err}
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
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
	root.AddCommand(newEngineCmd(log))
	return root
}

func newEngineCmd(log *slog.Logger) *cobra.Command {
	var uuid, members, socket string
	var ublkID int
	cmd := &cobra.Command{
		Use:    "engine --uuid U --members A,B,... --ublk-id N --socket PATH",
		Short:  "Serve one volume's engine (started and supervised by fabraidd)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if members == "" || socket == "" {
				return usageError{errors.New("--members and --socket are required")}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return volmgr.ServeEngine(ctx, strings.Split(members, ","), ublkID, socket, log.With("engine", uuid, "pid", os.Getpid()))
		},
	}
	f := cmd.Flags()
	f.StringVar(&uuid, "uuid", "", "volume UUID (for logs)")
	f.StringVar(&members, "members", "", "member devices, comma-separated")
	f.IntVar(&ublkID, "ublk-id", -1, "ublk device to re-attach (user recovery) or create; -1: any")
	f.StringVar(&socket, "socket", "", "control socket")
	return cmd
}
