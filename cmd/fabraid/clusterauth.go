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
	return &cobra.Command{
		Use:   "rotate-keys",
		Short: "Rotate this node's DH-HMAC-CHAP controller secret without an I/O error",
		Long: `Make a new DH-HMAC-CHAP controller secret for this node (the key its NVMe
target proves itself with to the hosts, bidirectional authentication). The
node's target takes it first (every host entry of its drive and volume
exports, in place: no connection is cut); once it presents it the key goes to
etcd, and every host connected to this node re-keys its live controllers at its
next reconcile (the kernel re-authenticates them while I/O flows on; new
connections use the new key). Run it on the node whose key is to change, one
node at a time. The host secret is not rotated by this command yet
(docs/cluster.md, "Key rotation").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			out, err := c.ClusterRotateKeys()
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated the %v secret: presented by this node's target and published after %.1f s; hosts re-authenticate at their next reconcile\n", out.Rotated, out.Seconds)
			return nil
		},
	}
}
