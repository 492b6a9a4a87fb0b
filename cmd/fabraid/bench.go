package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabraid/fabraid/engine/enginebench"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run benchmarks",
	}
	cmd.AddCommand(newBenchEngineCmd())
	return cmd
}

func newBenchEngineCmd() *cobra.Command {
	var cfg enginebench.Config
	var jsonOut bool
	var chunk, size string
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Measure the parity engine against raw member throughput (file members on tmpfs)",
		Long: `Creates k+m member files in --dir (tmpfs by default), measures their raw
throughput, then runs the parity engine on the same files with the same I/O
sizes and parallelism and prints the ratios (see docs/performance.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.ChunkSize, err = parseSize(chunk); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--chunk: %w", err)}
			}
			ms, err := parseSize(size)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--member-size: %w", err)}
			}
			cfg.MemberSize = int64(ms)
			if !jsonOut {
				cfg.Log = cmd.ErrOrStderr()
			}
			res, err := enginebench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "engine %d x (%d+%d), chunk %d KiB, %d jobs, %d CPUs, %.1f s\n",
				res.Groups, res.K, res.M, res.ChunkSize>>10, res.Jobs, res.CPUs, res.ElapsedSeconds)
			for _, l := range []struct {
				name        string
				got, target float64
			}{
				{"seq_write_ratio", res.SeqWriteRatio, 0.90},
				{"seq_read_ratio", res.SeqReadRatio, 0.95},
				{"degraded_read_ratio", res.DegradedReadRatio, 0.85},
				{"domain_lost_read_ratio", res.DomainLostReadRatio, 0.85},
				{"rand_read_ratio", res.RandReadRatio, 0.90},
				{"rand_write_ratio", res.RandWriteRatio, 0},
				{"rand_write_rmw_ratio", res.RandWriteRMWRatio, 0},
				{"rebuild_ratio", res.RebuildRatio, 0.80},
				{"rebuild_bound_ratio", res.RebuildBoundRatio, 0},
			} {
				mark := ""
				if l.target > 0 {
					mark = fmt.Sprintf("(target >= %.2f)", l.target)
				}
				fmt.Fprintf(out, "  %-24s %6.3f %s\n", l.name, l.got, mark)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	f.StringVar(&cfg.Dir, "dir", "/dev/shm", "directory for the member files (use tmpfs)")
	f.IntVar(&cfg.K, "k", 4, "data chunks per stripe")
	f.IntVar(&cfg.M, "m", 2, "parity chunks per stripe")
	f.IntVar(&cfg.Groups, "groups", 1, "groups of k+m members (RAID-x0)")
	f.StringVar(&chunk, "chunk", "64k", "chunk size")
	f.StringVar(&size, "member-size", "256m", "bytes per member file")
	f.IntVar(&cfg.Jobs, "jobs", 0, "parallel requests (default GOMAXPROCS)")
	f.DurationVar(&cfg.Duration, "duration", 500*time.Millisecond, "time per measurement round")
	f.IntVar(&cfg.Rounds, "rounds", 3, "alternating raw/engine rounds per measurement (best kept)")
	return cmd
}

// parseSize parses 4096, 64k, 256m, 1g.
func parseSize(s string) (int, error) {
	var n int
	var unit string
	if _, err := fmt.Sscanf(s, "%d%s", &n, &unit); err != nil {
		if _, err := fmt.Sscanf(s, "%d", &n); err != nil {
			return 0, fmt.Errorf("bad size %q", s)
		}
	}
	switch unit {
	case "":
	case "k", "K", "KiB":
		n <<= 10
	case "m", "M", "MiB":
		n <<= 20
	case "g", "G", "GiB":
		n <<= 30
	default:
		return 0, fmt.Errorf("bad size unit %q", unit)
	}
	return n, nil
}
