package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/drive"
	"github.com/spf13/cobra"
)

// loadConfig reads --config (a missing default file means defaults).
func loadConfig(cmd *cobra.Command) (config.Config, error) {
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		path = config.DefaultPath
	}
	var c config.Config
	var err error
	if cmd.Flags().Changed("config") {
		c, err = config.Load(path)
	} else {
		c, err = config.LoadOrDefault(path)
	}
	if err != nil {
		return c, &exitError{code: 2, err: err}
	}
	for _, w := range c.Warnings { // unknown keys: skipped (internal/config)
		fmt.Fprintln(cmd.ErrOrStderr(), "fabraid: warning:", w)
	}
	return c, nil
}

func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newDriveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drive",
		Short: "List local drives and claim them for fabraid",
	}
	cmd.PersistentFlags().String("config", config.DefaultPath, "configuration file (for state_dir)")
	cmd.AddCommand(newDriveListCmd(), newDriveClaimCmd(), newDriveSpareCmd(), newDriveReleaseCmd())
	return cmd
}

func newDriveListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List local drives: model, serial, size, state and why a drive is in use",
		Example: `  fabraid drive list
  fabraid drive list --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ds, err := drive.System(c.StateDir).Inventory()
			if err != nil {
				return err
			}
			if asJSON {
				if ds == nil {
					ds = []drive.Drive{}
				}
				return printJSON(cmd, ds)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DEVICE\tID\tMODEL\tSIZE\tSTATE\tREASONS")
			for _, d := range ds {
				state := d.State
				if d.Spare {
					state += " (spare)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Path, d.ID, d.Model, humanSize(d.Size), state, strings.Join(d.Reasons, "; "))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newDriveClaimCmd() *cobra.Command {
	var force, spare bool
	cmd := &cobra.Command{
		Use:   "claim DEV...",
		Short: "Claim drives for fabraid (wipes their first and last MiB)",
		Long: `Claim drives for fabraid volumes. A drive with partitions, a filesystem,
RAID or fabraid signature, a holder (dm, md), or another exclusive opener is
refused unless --force; a mounted drive is always refused. Claiming zeroes the
first and last MiB of the drive and records it in <state_dir>/drives/.

Exit codes: 0 all claimed, 1 a drive was refused or an error occurred.`,
		Example: `  fabraid drive claim /dev/nvme1n1 /dev/nvme2n1
  fabraid drive claim --force /dev/sdc`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			h := drive.System(c.StateDir)
			var errs []error
			for _, dev := range args {
				cl, err := h.ClaimSpare(dev, force, spare)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				what := ""
				if cl.Spare {
					what = ", spare"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "claimed %s (id %s, %s%s)\n", cl.Path, cl.ID, humanSize(cl.Size), what)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "claim a drive even with signatures, partitions, holders or openers (never a mounted one)")
	cmd.Flags().BoolVar(&spare, "spare", false, "keep the drive as a spare: no new volume's member, taken first by replacements (see drive spare)")
	return cmd
}

func newDriveSpareCmd() *cobra.Command {
	var off bool
	cmd := &cobra.Command{
		Use:   "spare ID... [--off]",
		Short: "Keep claimed drives as spares (or, with --off, as ordinary free drives)",
		Long: `Mark claimed drives as spares. In a cluster a spare is never placed as a new
volume's member; a replacement takes a fitting spare before any other free drive,
and the owner of a volume replaces a member that failed for good (an I/O error,
volume fail) with a fitting spare at once, as mdadm does, and the members of a
node down for down_out_interval likewise. A spare that is a volume member
already stays one; it becomes a spare when it is free again.`,
		Example: `  fabraid drive spare S4EWNX0R123456
  fabraid drive spare --off S4EWNX0R123456`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			h := drive.System(c.StateDir)
			var errs []error
			for _, id := range args {
				if err := h.SetSpare(id, !off); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&off, "off", false, "make the drives ordinary free drives again")
	return cmd
}

func newDriveReleaseCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "release ID [--force]",
		Short: "Forget a claim (the drive's data is left alone)",
		Long: `Forget the claim of drive ID. A drive that is a volume member (it carries a
fabraid superblock or a running engine holds it) is refused unless --force.`,
		Example: `  fabraid drive release S4EWNX0R123456`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			return drive.System(c.StateDir).Release(args[0], force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "release even a volume member")
	return cmd
}
