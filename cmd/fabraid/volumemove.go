package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fabraid/fabraid/internal/api"
)

func newVolumeMoveCmd() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "move VOLUME NODE [--wait]",
		Short: "Move a volume to another owner node without an I/O error (a cluster)",
		Long: `Make NODE the owner of VOLUME: the node that runs its engine and exports it.
The consumers' I/O pauses and resumes on NODE's path, without an error: the old
owner turns its export inaccessible (the hosts queue their I/O), freezes its
engine, hands the requests it holds back to the hosts, flushes its members and
gives the owner key up; NODE takes the key at a newer
epoch, fences the old owner from the drives, assembles and exports; the old owner
removes its export once every node has a live path to NODE (docs/cluster.md,
"Planned move"). Any node may be asked. Refused when NODE is unknown, down or the
owner already, when the volume is not ready or its owner is down (failover brings
it back), or while another move of it is under way.

Without --wait the command returns once the move is recorded; with it, when the
old owner has removed its export (or the move failed).` + volumeExitCodes,
		Example: "  fabraid volume move vol0 node2 --wait",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			out, err := c.Move(args[0], api.MoveRequest{Node: args[1], Wait: wait})
			if err != nil {
				return apiError(err)
			}
			switch out.Phase {
			case "done":
				fmt.Fprintf(cmd.OutOrStdout(), "volume %s moved from %s to %s (epoch %d -> %d; old export inaccessible for %.1f s before %s served)\n",
					args[0], out.From, out.To, out.Epoch, out.ToEpoch, out.PauseSeconds, out.To)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "volume %s: move from %s to %s %s (fabraid volume show %s follows it)\n",
					args[0], out.From, out.To, out.Phase, args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the move has ended")
	return cmd
}
