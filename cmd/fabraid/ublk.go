package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/units"
	"github.com/fabraid/fabraid/kernel/ublk"
	"github.com/spf13/cobra"
)

func newUblkCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ublk",
		Short: "Serve and inspect ublk block devices (/dev/ublkbN)",
	}
	cmd.AddCommand(newUblkServeCmd(), newUblkFeaturesCmd(), newUblkListCmd(), newUblkDeleteCmd())
	return cmd
}

// ublkError maps a missing kernel feature to exit code 3.
func ublkError(err error) error {
	if errors.Is(err, ublk.ErrNotSupported) {
		return &exitError{code: 3, err: err}
	}
	return err
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	return enc.Encode(v)
}

// parseUblkSize parses 4096, 64K, 512M, 1G, 2T (powers of 1024; positive).
func parseUblkSize(s string) (int64, error) {
	n, err := units.ParseBytes(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional K, M, G or T suffix", s)
	}
	return n, nil
}

// openUblkBackend parses --backend: mem:SIZE, null:SIZE, file:PATH[:SIZE].
func openUblkBackend(spec string) (ublk.Backend, func(), error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "mem", "null":
		size, err := parseUblkSize(arg)
		if err != nil {
			return nil, nil, fmt.Errorf("--backend %s: %w", spec, err)
		}
		if kind == "mem" {
			return ublk.NewMem(size), func() {}, nil
		}
		return ublk.NewNull(size), func() {}, nil
	case "file":
		path, sizeStr, hasSize := strings.Cut(arg, ":")
		var size int64
		if hasSize {
			var err error
			if size, err = parseUblkSize(sizeStr); err != nil {
				return nil, nil, fmt.Errorf("--backend %s: %w", spec, err)
			}
		}
		f, err := ublk.OpenFile(path, size)
		if err != nil {
			return nil, nil, err
		}
		return f, func() { f.Close() }, nil
	case "volume":
		// Assemble the engine volume from its member devices or files.
		paths := strings.Split(arg, ",")
		if arg == "" {
			return nil, nil, fmt.Errorf("--backend %s: want volume:MEMBER,MEMBER,...", spec)
		}
		vol, err := engine.Open(paths, engine.Options{})
		if err != nil {
			return nil, nil, err
		}
		return vol, func() {
			if err := vol.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "fabraid:", err)
			}
		}, nil
	}
	return nil, nil, fmt.Errorf("--backend %q: want mem:SIZE, null:SIZE, file:PATH[:SIZE] or volume:MEMBER,...", spec)
}

type ublkDeviceJSON struct {
	ID     int      `json:"id"`
	Block  string   `json:"block"`
	Char   string   `json:"char"`
	Queues int      `json:"queues"`
	Depth  int      `json:"depth"`
	Flags  []string `json:"flags"`
	State  string   `json:"state,omitempty"`
	PID    int      `json:"pid,omitempty"`
}

func newUblkServeCmd() *cobra.Command {
	var (
		backend    string
		cfg        ublk.Config
		maxIO      string
		recoverID  int
		noRecovery bool
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "serve --backend mem:SIZE|null:SIZE|file:PATH[:SIZE]|volume:MEMBER,...",
		Short: "Create a ublk device and serve it until SIGINT or SIGTERM",
		Long: `Create /dev/ublkbN backed by the given backend and serve it in this process.

Once the device exists, one line describing it is printed on stdout (JSON with
--json). SIGINT or SIGTERM stops the device and deletes it. If the process
dies instead (SIGKILL, crash), a device created with user recovery (the
default) stays, holding I/O, until "fabraid ublk serve --recover N" re-attaches
a new server or "fabraid ublk delete N" removes it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, closeBackend, err := openUblkBackend(backend)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			defer closeBackend()
			if maxIO != "" {
				n, err := parseUblkSize(maxIO)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--max-io: %w", err)}
				}
				cfg.MaxIOBytes = int(n)
			}
			cfg.NoRecovery = noRecovery
			if vol, ok := b.(*engine.Volume); ok {
				// The block layer learns the chunk and the full stripe as the
				// minimum and optimal I/O sizes.
				if !cmd.Flags().Changed("async") {
					cfg.Async = true
				}
				g := vol.Geometry()
				cfg.LogicalBlockSize = max(cfg.LogicalBlockSize, vol.BlockSize())
				if !cmd.Flags().Changed("io-min") {
					cfg.IOMin = g.ChunkSize
				}
				if !cmd.Flags().Changed("io-opt") {
					cfg.IOOpt = int(g.StripeBytes())
				}
			}
			// Each queue thread lives in io_uring_enter. When no P is idle, the
			// runtime hands a P in a syscall to another thread after ~20µs and
			// the queue thread must win one back after every wakeup, which costs
			// several context switches per request. An idle P avoids that.
			if want := cfg.Queues + 2; runtime.GOMAXPROCS(0) < want {
				runtime.GOMAXPROCS(want)
			}
			// Catch signals before the device exists, so none is lost.
			parent := cmd.Context()
			if parent == nil {
				parent = context.Background()
			}
			ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
			defer stop()

			ctl, err := ublk.OpenControl()
			if err != nil {
				return ublkError(err)
			}
			defer ctl.Close()
			var d *ublk.Device
			if cmd.Flags().Changed("recover") {
				d, err = ublk.Recover(ctl, recoverID, b, &cfg)
			} else {
				d, err = ublk.Create(ctl, b, &cfg)
			}
			if err != nil {
				return ublkError(err)
			}
			info := ublkDeviceJSON{ID: d.ID(), Block: d.BlockPath(), Char: d.CharPath(), Queues: d.Queues(), Depth: d.Depth(), Flags: d.Flags().Names(), PID: os.Getpid()}
			if asJSON {
				printJSON(cmd, info)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "serving %s (id %d, %d queue(s) of depth %d, flags %s)\n", d.BlockPath(), d.ID(), d.Queues(), d.Depth(), d.Flags())
			}
			// Until SIGINT/SIGTERM (then stop and delete the device), or until
			// the device is stopped from outside (fabraid ublk delete).
			if err := d.Run(ctx); err != nil {
				return fmt.Errorf("serve %s: %w", d.BlockPath(), err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&backend, "backend", "", "mem:SIZE, null:SIZE, file:PATH[:SIZE] or volume:MEMBER,MEMBER,... (an engine volume assembled from its members)")
	f.IntVar(&cfg.ID, "id", ublk.AnyID, "device id N for /dev/ublkbN (-1: the kernel picks)")
	f.IntVar(&cfg.Queues, "queues", 1, "hardware queues (one thread and io_uring each)")
	f.IntVar(&cfg.Depth, "depth", 128, "requests in flight per queue")
	f.StringVar(&maxIO, "max-io", "512K", "largest request")
	f.IntVar(&cfg.LogicalBlockSize, "block-size", 4096, "logical block size")
	f.IntVar(&cfg.IOMin, "io-min", 0, "minimum I/O size hint in bytes (default: the volume's chunk, else the block size)")
	f.IntVar(&cfg.IOOpt, "io-opt", 0, "optimal I/O size hint in bytes, rounded down to a power of two (default: the volume's full stripe)")
	f.BoolVar(&cfg.UserCopy, "user-copy", false, "move data with pread/pwrite on /dev/ublkcN (UBLK_F_USER_COPY)")
	f.BoolVar(&cfg.Async, "async", false, "serve each request in its own goroutine (default for volume backends)")
	f.BoolVar(&noRecovery, "no-recovery", false, "create the device without user recovery")
	f.IntVar(&recoverID, "recover", -1, "re-attach to existing device N whose server died, instead of creating one")
	f.BoolVar(&asJSON, "json", false, "print the device as JSON")
	cmd.MarkFlagRequired("backend")
	return cmd
}

func newUblkFeaturesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "features",
		Short: "Print the ublk features of the running kernel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctl, err := ublk.OpenControl()
			if err != nil {
				return ublkError(err)
			}
			defer ctl.Close()
			f := ctl.Features()
			if asJSON {
				return printJSON(cmd, map[string]any{"features": uint64(f), "names": f.Names()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%#x %s\n", uint64(f), f)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newUblkListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List ublk devices and their state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ids, err := ublk.List()
			if err != nil {
				return err
			}
			out := []ublkDeviceJSON{}
			if len(ids) > 0 {
				ctl, err := ublk.OpenControl()
				if err != nil {
					return ublkError(err)
				}
				defer ctl.Close()
				for _, id := range ids {
					info, err := ctl.Info(id)
					if err != nil {
						return err
					}
					out = append(out, ublkDeviceJSON{ID: id, Block: fmt.Sprintf("/dev/ublkb%d", id), Char: fmt.Sprintf("/dev/ublkc%d", id),
						Queues: info.Queues, Depth: info.Depth, Flags: info.Flags.Names(), State: info.State.String(), PID: info.PID})
				}
			}
			if asJSON {
				return printJSON(cmd, out)
			}
			for _, d := range out {
				fmt.Fprintf(cmd.OutOrStdout(), "%d\t%s\t%s\tpid %d\t%d x %d\t%s\n", d.ID, d.Block, d.State, d.PID, d.Queues, d.Depth, strings.Join(d.Flags, "|"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newUblkDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Stop and delete a ublk device (for example one whose server died)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.Atoi(args[0])
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("device id %q: %w", args[0], err)}
			}
			ctl, err := ublk.OpenControl()
			if err != nil {
				return ublkError(err)
			}
			defer ctl.Close()
			return ctl.Delete(id)
		},
	}
}
