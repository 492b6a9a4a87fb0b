package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the fabraid version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rev := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = s.Value
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fabraid %s (commit %s, %s, %s/%s)\n",
				version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
