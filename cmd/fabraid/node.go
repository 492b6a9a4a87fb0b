package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
)

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Node maintenance in a cluster (drain before a reboot)",
	}
	cmd.PersistentFlags().String("config", config.DefaultPath, "configuration file (for api_socket)")
	cmd.PersistentFlags().String("socket", "", "fabraidd API socket (default: api_socket from the configuration)")
	cmd.AddCommand(newNodeDrainCmd(), newNodeUndrainCmd())
	return cmd
}

func newNodeDrainCmd() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "drain NODE [--wait]",
		Short: "Move every volume NODE owns to other nodes, and keep it from owning any",
		Long: `Mark NODE drained: it is chosen as no volume's owner (new volumes, takeovers and
moves go elsewhere) and it moves each volume it owns to another node with a
planned move (fabraid volume move: no I/O error at the consumers, their I/O
pauses). Its drives keep serving as members, so a reboot of a drained node
degrades its volumes' members until it is back (a partial resync), but stops no
volume. Run it before taking a node down for maintenance; fabraid node undrain
NODE ends it (volumes do not move back by themselves). Any node may be asked.

Without --wait the command returns once the drain is recorded, with what NODE
owns; with it, when NODE owns no volume (or a move failed: exit 1). A volume
that no other live, exporting, undrained node may own stays and is named.`,
		Example: "  fabraid node drain node2 --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			out, err := c.Drain(args[0], true, api.DrainRequest{Wait: wait})
			printDrain(cmd.OutOrStdout(), out)
			return apiError(err)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the node owns no volume")
	return cmd
}

func newNodeUndrainCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "undrain NODE",
		Short: "Let NODE own volumes again (after fabraid node drain)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			out, err := c.Drain(args[0], false, api.DrainRequest{})
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s: not drained; it may own volumes again (it owns %d)\n", out.Node, len(out.Owned))
			return nil
		},
	}
}

// printDrain says what a drained node still owns and how its moves stand.
func printDrain(w io.Writer, out api.DrainReply) {
	if out.Node == "" {
		return
	}
	if len(out.Owned) == 0 {
		fmt.Fprintf(w, "node %s drained: it owns no volume\n", out.Node)
		return
	}
	fmt.Fprintf(w, "node %s drained: it still owns %d volume(s)\n", out.Node, len(out.Owned))
	for _, m := range out.Moves {
		fmt.Fprintf(w, "  %s: move to %s %s\n", m.Volume, m.To, m.Phase)
	}
	for _, s := range out.Stuck {
		fmt.Fprintf(w, "  %s\n", s)
	}
}
