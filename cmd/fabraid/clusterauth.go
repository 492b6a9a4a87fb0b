package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newClusterEnableRBACCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "enable-rbac",
		Short: "Turn on least privilege in etcd for a cluster made before it (idempotent)",
		Long: `Give every etcd member's node etcd's root role and every other registered node
the client roles (each may write only its own keys; docs/cluster.md, "etcd
RBAC"), then turn etcd's authentication on. Clusters made by this version have
it from init. Run it on an etcd member (fabraid cluster status lists them): a
client-only node is refused. Running it again is harmless; run it again after
a node joined through a member of an older version (that node has no etcd user
yet). External etcd is its operator's business and is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			if err := c.ClusterEnableRBAC(); err != nil {
				return apiError(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "etcd RBAC is on: every node writes only what its role needs")
			return nil
		},
	}
}

func newClusterRotateKeysCmd() *cobra.Command {
	var host bool
	cmd := &cobra.Command{
		Use:   "rotate-keys",
		Short: "Rotate this node's DH-HMAC-CHAP controller secret (or, with --host, its host secret) without an I/O error",
		Long: `Make a new DH-HMAC-CHAP controller secret for this node (the key its NVMe
target proves itself with to the hosts, bidirectional authentication). The
node's target takes it first (every host entry of its drive and volume
exports, in place: no connection is cut); once it presents it the key goes to
etcd, and every host connected to this node re-keys its live controllers at its
next reconcile (the kernel re-authenticates them while I/O flows on; new
connections use the new key).

With --host, make a new host secret instead (the key this node proves itself
with to the other nodes' targets). It is announced in etcd as pending while the
node keeps presenting the old one; every other node's target puts it on this
node's host entries in place (no fence) and acknowledges; then this node
switches to it and re-keys its live controllers. The command waits up to 60 s
for the acknowledgements; a node that has not acknowledged by then (down, cut
off) is named, the node switches regardless, and that node's exports to it
fence when it applies the new key (those controllers reconnect). It returns
once no live controller of this node presents the old key.

Run it on the node whose key is to change, one node at a time
(docs/cluster.md, "Key rotation").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			out, err := c.ClusterRotateKeys(host)
			if err != nil {
				return apiError(err)
			}
			w := cmd.OutOrStdout()
			if host {
				fmt.Fprintf(w, "rotated the host secret: in force and on every live controller after %.1f s\n", out.Seconds)
				if len(out.NotAcknowledged) > 0 {
					fmt.Fprintf(w, "not acknowledged by %v: their exports to this node fence when they apply the new key\n", out.NotAcknowledged)
				}
				return nil
			}
			fmt.Fprintf(w, "rotated the %v secret: presented by this node's target and published after %.1f s; hosts re-authenticate at their next reconcile\n", out.Rotated, out.Seconds)
			return nil
		},
	}
	cmd.Flags().BoolVar(&host, "host", false, "rotate the host secret instead of the controller secret")
	return cmd
}
