package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fabraid/fabraid/internal/api"
)

func newVolumeAttachCmd() *cobra.Command {
	var all, none, asJSON bool
	cmd := &cobra.Command{
		Use:   "attach VOLUME (NODE... | --all | --none)",
		Short: "Set the nodes that consume a cluster volume",
		Long: `Attach VOLUME to exactly the NODEs named: they connect to its NVMe head
(/dev/fabraid/VOLUME appears there), every other node disconnects from it, and
the owner's export admits only the attached nodes' hosts. --all attaches it to
every node (the default for a volume created without --attach), --none to no
node. A node that is detached loses its head: unmount or stop what uses it
first. Storage Scale NSD servers must be attached to the volumes of their NSDs.
Any node may be asked; the change reaches every node with its next reconcile.` + volumeExitCodes,
		Example: "  fabraid volume attach vol0 nsd1 nsd2\n  fabraid volume attach vol0 --all",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nodes := args[1:]
			if n := len(nodes); (all && (none || n > 0)) || (none && n > 0) || (!all && !none && n == 0) {
				return &exitError{code: 2, err: fmt.Errorf("name the nodes, or give --all or --none (one of the three)")}
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			v, err := c.Attach(args[0], api.AttachRequest{All: all, Nodes: nodes})
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(cmd, v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "volume %s attached to %s\n", v.Name, v.Attached.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "attach to every node")
	cmd.Flags().BoolVar(&none, "none", false, "attach to no node")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the volume as JSON")
	return cmd
}
