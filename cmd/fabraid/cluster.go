package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/spf13/cobra"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Make a cluster of nodes, let nodes in and out, show it (through fabraidd)",
		Long: `A cluster is a set of nodes that share one etcd (embedded in fabraidd on the
first 1, 3 or 5 nodes, or external with etcd_endpoints). See docs/cluster.md.` + volumeExitCodes,
	}
	cmd.PersistentFlags().String("config", config.DefaultPath, "configuration file (for api_socket)")
	cmd.PersistentFlags().String("socket", "", "fabraidd API socket (default: api_socket from the configuration)")
	cmd.AddCommand(newClusterInitCmd(), newClusterTokenCmd(), newClusterJoinCmd(), newClusterStatusCmd(),
		newClusterLeaveCmd(), newClusterRemoveCmd(), newClusterEnableRBACCmd(), newClusterRotateKeysCmd())
	return cmd
}

func newClusterInitCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "init [--name NAME]",
		Short: "Make a new cluster with this node as its first etcd member",
		Long: `Make the cluster CA, this node's certificate, and start an embedded etcd member
in fabraidd on cluster_address (etcd_peer_port, etcd_client_port) with its join
service on join_port. Then make join tokens with "fabraid cluster token".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			if err := c.ClusterInit(name); err != nil {
				return apiError(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "cluster initialized; add nodes with: fabraid cluster token, then fabraid cluster join on each")
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "fabraid", "cluster name")
	return cmd
}

func newClusterTokenCmd() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token [--ttl DURATION]",
		Short: "Make a single-use join token",
		Long: `Print a join token for one node. It works once, until it expires (--ttl), and
carries the CA fingerprint the joining node checks. Treat it as a password.
--ttl is at most ` + model.MaxTokenTTL.String() + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < time.Minute || ttl > model.MaxTokenTTL {
				return &exitError{code: 2, err: fmt.Errorf("--ttl %v: want 1m0s..%v (a join token is a password: at most %v)", ttl, model.MaxTokenTTL, model.MaxTokenTTL)}
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			t, err := c.ClusterToken(ttl)
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), t.Token)
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid (1m0s.."+model.MaxTokenTTL.String()+")")
	return cmd
}

func newClusterJoinCmd() *cobra.Command {
	var tok, tokFile string
	cmd := &cobra.Command{
		Use:   "join ADDR (--token-file FILE | --token - | --token TOKEN)",
		Short: "Join the cluster whose member answers at ADDR (host[:join_port])",
		Long: `Join the cluster whose member answers at ADDR (host[:join_port]) with a join
token from "fabraid cluster token" on a member. Give the token in a file
(--token-file FILE, best 0600) or on standard input (--token -): a token on the
command line (--token TOKEN) works but is visible to other users (ps,
/proc/PID/cmdline) and stays in the shell's history.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := joinToken(cmd, tok, tokFile)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			if err := c.ClusterJoin(args[0], t); err != nil {
				return apiError(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "joined")
			return nil
		},
	}
	cmd.Flags().StringVar(&tok, "token", "", `join token from fabraid cluster token, or "-" to read it from standard input (a token here is visible to other users)`)
	cmd.Flags().StringVar(&tokFile, "token-file", "", "file that holds the join token (its first line)")
	return cmd
}

// joinToken is the token of cluster join: the first line of --token-file
// or, with --token -, of standard input, else --token itself (with a
// warning: argv is visible to every user of the host and lands in shell
// history).
func joinToken(cmd *cobra.Command, tok, file string) (string, error) {
	warn := cmd.ErrOrStderr()
	switch {
	case tok != "" && file != "":
		return "", fmt.Errorf("give --token or --token-file, not both")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&0o077 != 0 {
			fmt.Fprintf(warn, "warning: %s is readable by other users (mode %04o): the join token is a password, chmod 600 it\n", file, fi.Mode().Perm())
		}
		return firstLine(f, "--token-file "+file)
	case tok == "-":
		return firstLine(cmd.InOrStdin(), "standard input")
	case tok != "":
		fmt.Fprintln(warn, "warning: a join token given with --token is visible to other users (ps, /proc/PID/cmdline) and stays in the shell history; use --token-file FILE or --token - (standard input)")
		return tok, nil
	}
	return "", fmt.Errorf("--token-file FILE or --token - (standard input) is required (make a token with fabraid cluster token on a member)")
}

// firstLine reads the first non-empty line of r (at most 4 KiB), trimmed.
func firstLine(r io.Reader, what string) (string, error) {
	sc := bufio.NewScanner(io.LimitReader(r, 4<<10))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			return l, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return "", fmt.Errorf("%s: no join token", what)
}

func newClusterStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show etcd members, leader, health, nodes and their drives",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			s, err := c.ClusterStatus()
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(cmd, s)
			}
			printClusterStatus(cmd.OutOrStdout(), s)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printClusterStatus(out io.Writer, s api.ClusterStatus) {
	health := "healthy"
	if !s.Healthy {
		health = "UNHEALTHY"
	}
	fmt.Fprintf(out, "cluster %s (%s etcd): %s, leader %s\n\n", s.Cluster, s.Etcd, health, orDash(s.Leader))
	if s.Problem != "" {
		fmt.Fprintf(out, "problem: %s\n\n", s.Problem)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tID\tROLE\tHEALTH\tPEER")
	for _, m := range s.Members {
		role := "voter"
		if m.Learner {
			role = "learner"
		}
		if m.Leader {
			role = "leader"
		}
		h := "ok"
		if !m.Healthy {
			h = "down: " + m.Error
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.ID, role, h, strings.Join(m.PeerURLs, ","))
	}
	w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tDOMAIN\tSTATE\tADDRESS\tSTORAGE\tEXPORTS\tDRIVES")
	var refused []string
	for _, n := range s.Nodes {
		st := "alive"
		if !n.Alive {
			st = "DEAD"
			if !n.DownSince.IsZero() { // the re-protection clock's start
				st += " since " + n.DownSince.UTC().Format(time.RFC3339)
			}
		}
		if n.Drained {
			st += ",drained"
		}
		var drives []string
		for _, d := range n.Drives {
			drives = append(drives, fmt.Sprintf("%s(%s)", d.ID, humanBytes(d.Size)))
		}
		ex := n.Exports
		if n.CannotExport() {
			ex = "REFUSED"
			refused = append(refused, fmt.Sprintf("node %s exports nothing (no drive serves another owner, it owns no volume): %s", n.Name, n.ExportsWhy))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Domain, st, n.ClusterAddress, orDash(strings.Join(n.StorageAddresses, ",")), orDash(ex), orDash(strings.Join(drives, " ")))
	}
	w.Flush()
	for _, r := range refused {
		fmt.Fprintln(out, r)
	}
	fmt.Fprintln(out)
	if len(s.Volumes) == 0 {
		fmt.Fprintln(out, "no volumes")
		return
	}
	printClusterVolumes(out, s.Volumes)
}

// printClusterVolumes prints one line per volume: geometry, owner, the
// owner's state word (with the running task), and the members that are
// not active as slot@node(failure or role).
func printClusterVolumes(out io.Writer, vols []model.VolumeInfo) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "VOLUME\tUUID\tK+M\tOWNER\tSTATE\tDEGRADED")
	for _, v := range vols {
		geo := fmt.Sprintf("%d+%d", v.K, v.M)
		if v.Groups > 1 {
			geo = fmt.Sprintf("%dx%s", v.Groups, geo)
		}
		st := v.State
		if v.Task != "" {
			st += fmt.Sprintf(" (%s %.0f%%)", v.Task, v.Progress)
		}
		if v.ResyncBytes > 0 {
			st += " resynced " + humanBytes(v.ResyncBytes)
		}
		var deg []string
		for _, m := range v.Degraded {
			why := m.Role
			if m.Failure != "" {
				why = m.Failure
			}
			deg = append(deg, fmt.Sprintf("%d@%s(%s)", m.Slot, m.Node, why))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.UUID, geo, orDash(v.Owner), st, orDash(strings.Join(deg, " ")))
	}
	w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newClusterLeaveCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "leave [--force]",
		Short: "Take this node out of its cluster (its etcd member too)",
		Long: `Remove this node's registry record and etcd member and delete its cluster
state. Refused when it would remove the last etcd member or shrink two members
to one; --force does it anyway.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			if err := c.ClusterLeave(force); err != nil {
				return apiError(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "left the cluster")
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "leave even as the last etcd member, or one of two")
	return cmd
}

func newClusterRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NODE",
		Short: "Remove a dead node (its etcd member and registry record)",
		Long:  `Refused while NODE is alive: a live node leaves with fabraid cluster leave.`,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			if err := c.ClusterRemove(args[0]); err != nil {
				return apiError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}
}
