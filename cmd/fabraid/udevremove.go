package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/spf13/cobra"
)

// removeTimeout bounds udev-remove: udev runs it (RUN+=) in its worker and
// must not wait on a daemon that is busy. The daemon finishes the removal
// even when this command gave up waiting for the answer.
const removeTimeout = 3 * time.Second

func newUdevRemoveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "udev-remove DEVNODE",
		Short: "Tell fabraidd that a member's block device went away (for udev rules)",
		Long: `Tell fabraidd that the block device DEVNODE was removed (udev "remove" event
of a fabraid member), as "mdadm --incremental --fail" does: every running
volume that has it as a member fails it as missing at once, instead of at the
next I/O error on it. The member comes back by itself, with a resync of what
was written meanwhile, when its drive appears again.

Waits at most 3 s for the daemon. Harmless when fabraidd is not running, when
DEVNODE is no member, and for a synthetic event ("udevadm trigger
--action=remove") while the device is still there: nothing changes.

Exit codes: 0 done or nothing to do, 1 the daemon failed or did not answer in
time (the daemon still finishes the removal), 2 bad usage.`,
		Example: `  ACTION=="remove", ENV{FABRAID_MEMBER}=="1", RUN+="/usr/bin/fabraid udev-remove $devnode"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: 2, err: errors.New("udev-remove: want one DEVNODE")}
			}
			c, err := apiClient(cmd)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			type answer struct {
				r   api.UdevRemoveReply
				err error
			}
			ch := make(chan answer, 1)
			go func() {
				r, err := c.UdevRemove(args[0])
				ch <- answer{r, err}
			}()
			var a answer
			select {
			case a = <-ch:
			case <-time.After(removeTimeout):
				return &exitError{code: 1, err: fmt.Errorf("udev-remove %s: fabraidd did not answer in %v", args[0], removeTimeout)}
			}
			switch {
			case errors.Is(a.err, api.ErrNoDaemon):
				fmt.Fprintf(cmd.ErrOrStderr(), "udev-remove %s: fabraidd is not running; nothing to do\n", args[0])
				return nil
			case a.err != nil:
				return &exitError{code: 1, err: fmt.Errorf("udev-remove %s: %w", args[0], a.err)}
			case a.r.Ignored != "":
				fmt.Fprintf(cmd.ErrOrStderr(), "udev-remove %s: %s\n", args[0], a.r.Ignored)
			case a.r.Done == "":
				fmt.Fprintf(cmd.ErrOrStderr(), "udev-remove %s: no running volume has it as a member\n", args[0])
			default:
				fmt.Fprintln(cmd.OutOrStdout(), a.r.Done)
			}
			return nil
		},
	}
	cmd.Flags().String("config", config.DefaultPath, "configuration file (for api_socket)")
	cmd.Flags().String("socket", "", "fabraidd API socket (default: api_socket from the configuration)")
	return cmd
}
