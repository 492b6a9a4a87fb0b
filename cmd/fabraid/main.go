// Command fabraid is the administrator's command line for fabraid: it inspects
// the node it runs on (doctor), manages drives and volumes through the node
// daemon, and runs benchmarks.
//
// Exit codes: 0 success, 1 the operation failed, 2 bad usage,
// 3 (doctor) a required kernel feature is missing, 4 fabraidd is not running,
// 5 (wait) timed out.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fabraid/fabraid/internal/manpage"
)

// exitError carries a specific process exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "fabraid",
		Short:         "Shared, protected NVMe pools from the drives already in your nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newBenchCmd(),
		newDoctorCmd(),
		newUblkCmd(),
		newNvmeCmd(),
		newDriveCmd(),
		newVolumeCmd(),
		newClusterCmd(),
		newNodeCmd(),
		newNsdCmd(),
		newWaitCmd(),
		newUdevProbeCmd(),
		newUdevRemoveCmd(),
		manpage.Command("1", "fabraid "+version),
	)
	return root
}

func main() {
	err := newRootCmd().Execute()
	if err == nil {
		return
	}
	if msg := err.Error(); msg != "" { // "": the exit status is the answer (nsd devices --user-exit)
		fmt.Fprintln(os.Stderr, "fabraid:", msg)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	os.Exit(1)
}
