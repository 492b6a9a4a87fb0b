package main

import (
	"bufio"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/spf13/cobra"
)

const volumeExitCodes = `
Exit codes: 0 success, 1 the operation failed, 2 bad usage,
4 fabraidd is not running (no answer on the API socket).`

func newVolumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Create and manage protected volumes (through fabraidd)",
	}
	cmd.PersistentFlags().String("config", config.DefaultPath, "configuration file (for api_socket)")
	cmd.PersistentFlags().String("socket", "", "fabraidd API socket (default: api_socket from the configuration)")
	cmd.AddCommand(newVolumeCreateCmd(), newVolumeListCmd(), newVolumeShowCmd(), newVolumeFailCmd(),
		newVolumeReAddCmd(), newVolumeReplaceCmd(), newVolumeRebuildCmd(), newVolumeScrubCmd(), newVolumeMoveCmd(), newVolumeAttachCmd(), newVolumeDeleteCmd())
	return cmd
}

func apiClient(cmd *cobra.Command) (*api.Client, error) {
	sock, _ := cmd.Flags().GetString("socket")
	if sock == "" {
		c, err := loadConfig(cmd)
		if err != nil {
			return nil, err
		}
		sock = c.APISocket
	}
	return api.NewClient(sock), nil
}

// apiError maps API errors to exit codes.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, api.ErrNoDaemon) {
		return &exitError{code: 4, err: err}
	}
	return err
}

func parseRate(s string) (int64, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	n, err := parseUblkSize(strings.TrimSuffix(s, "/s"))
	if err != nil {
		return 0, &exitError{code: 2, err: fmt.Errorf("--rate: %w", err)}
	}
	return n, nil
}

func newVolumeCreateCmd() *cobra.Command {
	var k, m int
	var chunk, journal string
	var drives, nodes, attach []string
	var groups int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME --data K --parity M [--chunk SIZE] [--journal SIZE] [--drives DEV,... | --nodes a,b,c] [--attach n1,n2]",
		Short: "Create a volume of K data + M parity chunks per stripe on claimed drives",
		Long: `Create a volume on K+M claimed, unused drives (default: the first K+M in
device order), start its engine, export it over NVMe/TCP and connect this node
to it. Prints the consumer device: the NVMe multipath head /dev/nvmeXnY.

In a cluster, placement picks free drives across the alive nodes (at most M
members of a group per failure domain) and the owner node that runs the
engine; the record goes into etcd and the command waits until the owner has
formatted the members and reports the volume ready. --nodes limits the
members and the owner to these nodes; --groups makes G groups of K+M.
--attach names the nodes that consume the volume (connect to its NVMe head;
its export admits their hosts only); default: every node. fabraid volume
attach changes it later.

--journal sets the stripe journal area on every member (rounded up so the
data starts on a 1 MiB boundary). The default is 1/128 of the smallest member,
at least 3 full-chunk records and at most 8 MiB (members below ~128 MiB get
~1 MiB). A larger journal fills less often under heavy writes, and a full
journal forces a retire: a flush and a header write on every member while the
writers wait. It costs its size on every member. Accepted: one full-chunk
record plus two 4 KiB header blocks up to 62 MiB, at most a quarter of a
member.` + volumeExitCodes,
		Example: `  fabraid volume create vol0 --data 4 --parity 2
  fabraid volume create scratch --data 2 --parity 1 --chunk 128K --drives /dev/nvme1n1,/dev/nvme2n1,/dev/nvme3n1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.CreateRequest{Name: args[0], K: k, M: m, Drives: drives, Nodes: nodes, Groups: groups}
			if cmd.Flags().Changed("attach") {
				req.Attach = &api.Attach{Nodes: attach}
			}
			if chunk != "" {
				n, err := parseUblkSize(chunk)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--chunk: %w", err)}
				}
				req.ChunkSize = int(n)
			}
			if journal != "" {
				n, err := parseUblkSize(journal)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--journal: %w", err)}
				}
				req.JournalBytes = n
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			in, err := c.Create(req)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(cmd, in)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created %s (%s), %d+%d, %s: %s\n", in.Name, in.UUID, in.K, in.M, humanSize(in.Size), in.Device)
			if in.Owner != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "owner: %s\n", in.Owner)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&k, "data", 0, "data chunks per stripe (K >= 2)")
	f.IntVar(&m, "parity", 0, "parity chunks per stripe (M 1..4)")
	f.StringVar(&chunk, "chunk", "", "chunk size (default 64K)")
	f.StringVar(&journal, "journal", "", "stripe journal area per member, e.g. 8M (default: 1/128 of a member, at most 8M)")
	f.StringSliceVar(&drives, "drives", nil, "claimed drives to use (paths, names or ids), exactly K+M (one node)")
	f.StringSliceVar(&nodes, "nodes", nil, "cluster: place members and owner on these nodes only")
	f.IntVar(&groups, "groups", 0, "cluster: groups of K+M members (default 1)")
	f.StringSliceVar(&attach, "attach", nil, "cluster: the nodes that consume the volume (default: every node)")
	f.BoolVar(&asJSON, "json", false, "print the volume as JSON")
	cmd.MarkFlagRequired("data")
	cmd.MarkFlagRequired("parity")
	return cmd
}

func newVolumeListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List volumes: state, size, geometry, consumer device",
		Long:    "List volumes." + volumeExitCodes,
		Example: "  fabraid volume list\n  fabraid volume list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			vs, err := c.Volumes()
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(cmd, vs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			owners := slices.ContainsFunc(vs, func(v api.Volume) bool { return v.Owner != "" })
			if owners {
				fmt.Fprintln(tw, "NAME\tSTATE\tSIZE\tLAYOUT\tOWNER\tDEVICE\tUUID")
			} else {
				fmt.Fprintln(tw, "NAME\tSTATE\tSIZE\tLAYOUT\tDEVICE\tUUID")
			}
			for _, v := range vs {
				if owners {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d+%d\t%s\t%s\t%s\n", v.Name, stateWithProgress(v), humanSize(v.Size), v.K, v.M, v.Owner, v.Device, v.UUID)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d+%d\t%s\t%s\n", v.Name, stateWithProgress(v), humanSize(v.Size), v.K, v.M, v.Device, v.UUID)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func stateWithProgress(v api.Volume) string {
	if v.Progress != nil {
		return fmt.Sprintf("%s (%s %.0f%%)", v.State, v.Progress.Kind, v.Progress.Percent)
	}
	return v.State
}

func newVolumeShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show VOLUME",
		Short:   "Show a volume: state, members, domains, progress, last scrub, I/O counters",
		Long:    "Show a volume by name or UUID." + volumeExitCodes,
		Example: "  fabraid volume show vol0\n  fabraid volume show vol0 --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			v, err := c.Volume(args[0])
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(cmd, v)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "name:     %s\nuuid:     %s\nstate:    %s\nsize:     %s (%d bytes)\nlayout:   %s\ndevice:   %s\nnqn:      %s\n",
				v.Name, v.UUID, stateWithProgress(v), humanSize(v.Size), v.Size, layoutText(v), v.Device, v.NQN)
			fmt.Fprintf(w, "ublk:     %s\n", ublkText(v))
			if v.Owner != "" {
				fmt.Fprintf(w, "owner:    %s%s\n", v.Owner, epochText(v.Epoch))
				fmt.Fprintf(w, "attached: %s\n", v.Attached.String())
			}
			switch v.ExportAuth {
			case api.ExportAuthDHCHAP:
				fmt.Fprintf(w, "exports:  DH-HMAC-CHAP (each host presents its secret)\n")
			case api.ExportAuthHostNQN:
				fmt.Fprintf(w, "WARNING:  exports unauthenticated: allowed by host NQN alone, the target has no DH-HMAC-CHAP\n"+
					"          (nvmet without CONFIG_NVME_TARGET_AUTH; see fabraid doctor)\n")
			case api.ExportAuthRefused:
				fmt.Fprintf(w, "WARNING:  exports refused: the target has no DH-HMAC-CHAP and require_auth is on; see fabraid doctor\n")
			}
			for _, r := range v.ExportRefused {
				fmt.Fprintf(w, "WARNING:  exports nothing: node %s (its members serve no other owner, it cannot own the volume)\n", r)
			}
			if v.PathRefused != "" {
				fmt.Fprintf(w, "WARNING:  no new path from this node: %s\n", v.PathRefused)
			}
			if v.Error != "" {
				fmt.Fprintf(w, "error:    %s\n", v.Error)
			}
			if v.Reprotect != "" {
				fmt.Fprintf(w, "reprotect: %s\n", v.Reprotect)
			}
			if v.State != "stopped" && v.State != "waiting" && v.State != "unknown" {
				fmt.Fprintf(w, "journal:  %s\n", journalText(v.Journal, v.JournalBytes))
				if v.OwnerJournal > 0 {
					fmt.Fprintf(w, "          owner-domain journaling on: writes to the owner's %d member(s) survive the owner's loss with them\n", v.OwnerJournal)
				}
			}
			if v.WriteHoleStripes > 0 {
				fmt.Fprintf(w, "WARNING:  up to %d stripe(s) could not be made consistent after an unclean stop with a member lost\n"+
					"          at the crash: chunks reconstructed there may be wrong (docs/engine.md, write hole)\n", v.WriteHoleStripes)
			}
			if v.Task != "" {
				fmt.Fprintf(w, "running:  %s\n", v.Task)
			}
			if t := v.LastTask; t != nil {
				res := "ok"
				if t.Error != "" {
					res = t.Error
				}
				fmt.Fprintf(w, "last:     %s %s in %.1fs at %s", t.Kind, res, t.Seconds, t.Finished.Format(time.RFC3339))
				if t.Scrub != nil {
					fmt.Fprintf(w, " (%d stripes, %d mismatches, %d repaired, %d skipped)", t.Scrub.Stripes, t.Scrub.Mismatches, t.Scrub.Repaired, t.Scrub.Skipped)
				}
				fmt.Fprintln(w)
			}
			if r := v.Rebuild; r != nil {
				fmt.Fprintf(w, "%s\n", rebuildText(r))
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SLOT\tDEVICE\tDOMAIN\tROLE")
			var failed []string
			for _, ms := range v.Members {
				role := ms.Role
				if ms.Resync {
					role += " (resync)"
				}
				if ms.Failure != "" {
					role += " (" + ms.Failure + ")"
					failed = append(failed, failureText(v.Name, ms))
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", ms.Slot, ms.Device, ms.Domain, role)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, f := range failed {
				fmt.Fprintln(w, f)
			}
			if v.IO == nil {
				return nil
			}
			fmt.Fprintln(w)
			return writeIOStats(w, v.IO)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func slotArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, &exitError{code: 2, err: fmt.Errorf("slot %q: want a member slot number (fabraid volume show)", s)}
	}
	return n, nil
}

func newVolumeFailCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "fail VOLUME SLOT [--force]",
		Short: "Mark a member failed (like mdadm --fail); I/O continues degraded",
		Long: `Mark member SLOT of VOLUME failed. The member stays failed, also across
restarts, until "fabraid volume re-add" or "fabraid volume replace" brings it back.
A fail that would leave a group with fewer than k members in sync (the volume
would fail) is refused and nothing changes, unless --force.` + volumeExitCodes,
		Example: "  fabraid volume fail vol0 3",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			slot, err := slotArg(args[1])
			if err != nil {
				return err
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			_, err = runOp(cmd, c, args[0], "fail", api.OpRequest{Slot: slot, Force: force}, false)
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "fail the member even if the volume fails with it (a group loses more than m members)")
	return cmd
}

func newVolumeReAddCmd() *cobra.Command {
	var rate string
	var wait bool
	cmd := &cobra.Command{
		Use:   "re-add VOLUME SLOT [--rate 200M] [--wait]",
		Short: "Bring a failed member back from its own drive and resync what it missed",
		Long: `Put the failed member SLOT of VOLUME back from the claimed drive that still
holds it (like mdadm --re-add) and start rebuilding in the background what it
missed: the regions written since it failed, or everything if it failed on an I/O
error. A member failed by request or on an I/O error never returns by itself, not
even after a restart; one that was missing or unreachable (its path or its node
was lost) comes back by itself when its drive is found again.` + volumeExitCodes,
		Example: "  fabraid volume re-add vol0 3 --wait",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			slot, err := slotArg(args[1])
			if err != nil {
				return err
			}
			r, err := parseRate(rate)
			if err != nil {
				return err
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			done, err := runOp(cmd, c, args[0], "re-add", api.OpRequest{Slot: slot, Rate: r}, wait)
			if err != nil {
				return err
			}
			if wait && done {
				return waitTask(cmd, c, args[0], "rebuild")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rate, "rate", "", "rebuild rate limit in bytes per second (e.g. 200M; default unlimited)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the rebuild has finished")
	return cmd
}

// failureText says why a member failed and how it comes back.
func failureText(volume string, ms api.Member) string {
	why := map[string]string{
		"admin":       "failed by request",
		"io-error":    "I/O error",
		"missing":     "missing at assembly",
		"unreachable": "unreachable: its path or device was lost",
		"unrecorded":  "reason not recorded",
	}[ms.Failure]
	if why == "" {
		why = ms.Failure
	}
	if ms.Failure == "missing" || ms.Failure == "unreachable" {
		return fmt.Sprintf("slot %d failed (%s): it comes back by itself, with a resync of what was written meanwhile, when its drive is found again; or \"fabraid volume replace %s %d DRIVE\"",
			ms.Slot, why, volume, ms.Slot)
	}
	return fmt.Sprintf("slot %d failed (%s): bring it back with \"fabraid volume re-add %s %d\" (its drive must be claimed and present) or \"fabraid volume replace %s %d DRIVE\"",
		ms.Slot, why, volume, ms.Slot, volume, ms.Slot)
}

func newVolumeReplaceCmd() *cobra.Command {
	var rate, node, drive string
	var wait bool
	cmd := &cobra.Command{
		Use:   "replace VOLUME SLOT [DRIVE | --node N [--drive D]] [--rate 200M] [--wait]",
		Short: "Put a claimed, unused drive into a failed slot and start the rebuild",
		Long: `Replace failed member SLOT of VOLUME with a claimed drive that is in no volume
and start rebuilding it in the background; follow it with "fabraid volume show".

On one node, DRIVE names the drive. In a cluster, any node may ask: without
--node and --drive the daemon picks a free drive that keeps the volume's
placement rule (at most m members of a group in one failure domain; the old
member's node first, then its domain); --node limits the choice to one node and
--drive (a claim id, as "fabraid drive list" shows it) names the drive. The volume
record moves the slot to the new drive (the old drive's claim is released and it
is no longer exported), and the owner imports the new drive, replaces and rebuilds.` + volumeExitCodes,
		Example: "  fabraid volume replace vol0 3 /dev/nvme7n1 --rate 500M\n  fabraid volume replace vol0 3 --node node4",
		Args:    cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			slot, err := slotArg(args[1])
			if err != nil {
				return err
			}
			if len(args) == 3 {
				if drive != "" {
					return fmt.Errorf("replace: give the drive once (DRIVE or --drive)")
				}
				drive = args[2]
			}
			r, err := parseRate(rate)
			if err != nil {
				return err
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			done, err := runOp(cmd, c, args[0], "replace", api.OpRequest{Slot: slot, Node: node, Drive: drive, Rate: r}, wait)
			if err != nil {
				return err
			}
			if wait && done {
				return waitTask(cmd, c, args[0], "rebuild")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rate, "rate", "", "rebuild rate limit in bytes per second (e.g. 200M; default unlimited)")
	cmd.Flags().StringVar(&node, "node", "", "cluster: take the new drive from this node")
	cmd.Flags().StringVar(&drive, "drive", "", "the new drive (a device on one node; a claim id in a cluster)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the rebuild has finished")
	return cmd
}

// runOp runs volume operation op and prints what the daemon says; done is
// false when the cluster owner has accepted the request but not finished
// it within the daemon's wait (there is nothing to wait for yet). With
// follow (--wait) such a request is followed until the owner has carried
// it out or refused it, so that done is true or an error is returned.
func runOp(cmd *cobra.Command, c *api.Client, ref, op string, q api.OpRequest, follow bool) (bool, error) {
	out, err := c.Op(ref, op, q)
	if err != nil {
		return false, apiError(err)
	}
	if out.Node != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "slot %d of %s: new member %s:%s (owner %s)\n", q.Slot, ref, out.Node, out.Drive, out.Owner)
	}
	if out.Message != "" {
		fmt.Fprintln(cmd.OutOrStdout(), out.Message)
	}
	if out.Request == "" {
		return true, nil
	}
	if !follow {
		return false, nil
	}
	return true, followRequest(cmd, c, ref, out.Request)
}

// followRequest polls request id of volume ref until it has its result:
// nil when the owner carried it out, the owner's refusal otherwise.
// Server-side errors (an etcd read past the daemon's bound) are retried
// for waitTransientLimit.
func followRequest(cmd *cobra.Command, c *api.Client, ref, id string) error {
	var failingSince time.Time
	for {
		out, err := c.Request(ref, id)
		if transientStatusError(err) && (failingSince.IsZero() || time.Since(failingSince) < waitTransientLimit) {
			if failingSince.IsZero() {
				failingSince = time.Now()
				fmt.Fprintf(cmd.ErrOrStderr(), "fabraid: request %s not readable now (%v); still waiting\n", id, err)
			}
			time.Sleep(time.Second)
			continue
		}
		if err != nil {
			return apiError(err)
		}
		failingSince = time.Time{}
		if out.Request == "" {
			return nil
		}
		time.Sleep(time.Second)
	}
}

// waitTask polls until the volume's background task of kind has finished.
func waitTask(cmd *cobra.Command, c *api.Client, ref, kind string) error {
	var failingSince time.Time
	for {
		v, err := c.Volume(ref)
		if transientStatusError(err) && (failingSince.IsZero() || time.Since(failingSince) < waitTransientLimit) {
			// The task runs on regardless of one slow status read (in a
			// cluster: an etcd read past the daemon's bound).
			if failingSince.IsZero() {
				failingSince = time.Now()
				fmt.Fprintf(cmd.ErrOrStderr(), "fabraid: status not readable now (%v); still waiting\n", err)
			}
			time.Sleep(time.Second)
			continue
		}
		if err != nil {
			return apiError(err)
		}
		failingSince = time.Time{}
		if v.Task == "" && v.LastTask != nil && v.LastTask.Kind == kind {
			if v.LastTask.Error != "" {
				return fmt.Errorf("%s: %s", kind, v.LastTask.Error)
			}
			if s := v.LastTask.Scrub; s != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "scrub: %d stripes, %d mismatches, %d repaired, %d skipped\n", s.Stripes, s.Mismatches, s.Repaired, s.Skipped)
				if s.Mismatches > s.Repaired {
					return &exitError{code: 1, err: fmt.Errorf("scrub found %d parity mismatches", s.Mismatches-s.Repaired)}
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s done in %.1fs\n", kind, v.LastTask.Seconds)
			}
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitTransientLimit is how long --wait keeps polling through status
// reads that fail with a server-side error before it gives up.
const waitTransientLimit = 2 * time.Minute

// transientStatusError: the daemon answered with a server-side error (a
// 5xx, e.g. an etcd read that timed out), not a refusal such as an
// unknown volume.
func transientStatusError(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Status >= 500
}

func newVolumeRebuildCmd() *cobra.Command {
	var rate string
	var wait bool
	cmd := &cobra.Command{
		Use:     "rebuild VOLUME [--rate 200M] [--wait]",
		Short:   "Rebuild stale or replaced members in the background",
		Long:    "Start a rebuild of the members that need one." + volumeExitCodes,
		Example: "  fabraid volume rebuild vol0 --rate 1G --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRate(rate)
			if err != nil {
				return err
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			done, err := runOp(cmd, c, args[0], "rebuild", api.OpRequest{Rate: r}, wait)
			if err != nil {
				return err
			}
			if wait && done {
				return waitTask(cmd, c, args[0], "rebuild")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rate, "rate", "", "rate limit in bytes per second (default unlimited)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until it has finished")
	return cmd
}

func newVolumeScrubCmd() *cobra.Command {
	var rate string
	var repair, wait bool
	cmd := &cobra.Command{
		Use:   "scrub VOLUME [--repair] [--rate 200M] [--wait]",
		Short: "Check every stripe's parity in the background",
		Long: `Read every stripe and check its parity; with --repair rewrite mismatching
parity. With --wait, print the result; exit 1 when unrepaired mismatches remain.` + volumeExitCodes,
		Example: "  fabraid volume scrub vol0 --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRate(rate)
			if err != nil {
				return err
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			done, err := runOp(cmd, c, args[0], "scrub", api.OpRequest{Repair: repair, Rate: r}, wait)
			if err != nil {
				return err
			}
			if wait && done {
				return waitTask(cmd, c, args[0], "scrub")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rate, "rate", "", "rate limit in bytes per second (default unlimited)")
	cmd.Flags().BoolVar(&repair, "repair", false, "rewrite mismatching parity")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the result")
	return cmd
}

func newVolumeDeleteCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete VOLUME [--yes]",
		Short: "Unexport, stop and destroy a volume (asks first; refuses while in use)",
		Long: `Delete VOLUME: disconnect and unexport it, stop its engine and wipe the
members' fabraid metadata (the drives stay claimed). Refused while the consumer
device is mounted or open. Asks for the volume name unless --yes.` + volumeExitCodes,
		Example: "  fabraid volume delete vol0\n  fabraid volume delete vol0 --yes",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			if !yes {
				v, err := c.Volume(args[0])
				if err != nil {
					return apiError(err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Delete volume %s (%s, %s)? All its data is lost. Type the name to confirm: ", v.Name, v.UUID, humanSize(v.Size))
				line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if strings.TrimSpace(line) != v.Name {
					return &exitError{code: 1, err: errors.New("not confirmed; nothing deleted")}
				}
			}
			if err := c.Delete(args[0]); err != nil {
				return apiError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask")
	return cmd
}

// rebuildText says how much the running or last rebuild rewrote: for a
// resync of returning members, the bitmap regions it covered against the
// member's size.
func rebuildText(r *api.RebuildBytes) string {
	when := "last"
	if r.Running {
		when = "running"
	}
	what := fmt.Sprintf("rebuild (%s): full, %s of %s written", when, humanSize(r.Bytes), humanSize(r.CoverBytes))
	if r.Partial {
		what = fmt.Sprintf("resync (%s): %d bitmap region(s), %s of %s written", when, r.Regions, humanSize(r.Bytes), humanSize(r.CoverBytes))
	}
	pct := 0.0
	if r.MemberBytes > 0 {
		pct = 100 * float64(r.CoverBytes) / float64(r.MemberBytes)
	}
	return fmt.Sprintf("%s; member data %s (to write: %.1f%% of it)", what, humanSize(r.MemberBytes), pct)
}

// ublkText is the engine's device and process, or where the engine runs
// when this node runs none (a cluster volume seen from a non-owner).
func ublkText(v api.Volume) string {
	switch {
	case v.Ublk != "" || v.EnginePID != 0:
		zc := ""
		if v.UblkZeroCopy {
			zc = ", zero-copy reads"
		}
		return fmt.Sprintf("%s (engine pid %d%s)", v.Ublk, v.EnginePID, zc)
	case v.Owner != "":
		return "none on this node (" + v.Owner + " runs the engine)"
	}
	return "none (no engine runs)"
}

// chunkText is the chunk size, or "unknown" when this node does not know it
// (a non-owner before the owner published its status).
func chunkText(n int) string {
	if n == 0 {
		return "unknown"
	}
	return humanSize(int64(n))
}

func epochText(e uint64) string {
	if e == 0 {
		return ""
	}
	return fmt.Sprintf(" (owner epoch %d)", e)
}

func journalText(on bool, size int64) string {
	switch {
	case on && size > 0:
		return fmt.Sprintf("on, %s per member (%d bytes; writes while degraded survive a crash)", humanSize(size), size)
	case on:
		return "on (writes while degraded survive a crash)"
	}
	return "off (format version 1: a crash while degraded can lose data; docs/engine.md)"
}

// layoutText is a volume's geometry, and its parity placement when that
// is the owner-parity layout.
func layoutText(v api.Volume) string {
	s := fmt.Sprintf("%d+%d x %d group(s), chunk %s", v.K, v.M, v.Groups, chunkText(v.ChunkSize))
	if v.FixedParity {
		s += fmt.Sprintf(", owner-parity (parity on each group's last %d members, where the owner's are placed)", v.M)
	}
	return s
}
