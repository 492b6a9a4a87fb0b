package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/nsd/discover"
	"github.com/spf13/cobra"
)

// waitPoll is how often fabraid wait asks the daemon again.
const waitPoll = 250 * time.Millisecond

func newWaitCmd() *cobra.Command {
	var volumes []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait [--volumes V,...] [--timeout D]",
		Short: "Wait until volumes have their consumer device on this node",
		Long: `Wait until every listed volume (default: every volume fabraidd knows, once it
answers) has its consumer device on this node: the NVMe multipath head exists
under /dev and is in /proc/partitions. For other units and Storage Scale's
preStartup callback. A daemon that does not answer yet is waited for too.

Exit codes: 0 every volume is up, 2 bad usage, 5 timed out (the message names
each volume that is not up and why).`,
		Example: "  fabraid wait --volumes vol0,scratch --timeout 5m",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return &exitError{code: 2, err: errors.New("--timeout: want a positive duration (e.g. 300s)")}
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := waitUp(ctx, c, volumes, waitPoll); err != nil {
				return &exitError{code: 5, err: err}
			}
			return nil
		},
	}
	cmd.Flags().String("config", config.DefaultPath, "configuration file (for api_socket)")
	cmd.Flags().String("socket", "", "fabraidd API socket (default: api_socket from the configuration)")
	cmd.Flags().StringSliceVar(&volumes, "volumes", nil, "volumes to wait for (default: every volume)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}

// waitUp asks l every poll until the volumes are up or ctx ends. On
// timeout the error names the newest reason the daemon gave: a poll cut off
// by the deadline says only "did not answer" and does not replace it.
func waitUp(ctx context.Context, l discover.Lister, volumes []string, poll time.Duration) error {
	t0 := time.Now()
	last := ""
	for {
		why, answered := notUp(ctx, l, volumes)
		if why == "" {
			return nil
		}
		if answered || last == "" {
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait: timed out after %v: %s", time.Since(t0).Round(time.Millisecond), last)
		case <-time.After(poll):
		}
	}
}

// notUp returns why the volumes are not all up yet ("" when they are), and
// whether the daemon's answer (or its error) came before ctx ended. The
// daemon is asked in a goroutine so that a hung socket cannot outlast ctx.
func notUp(ctx context.Context, l discover.Lister, want []string) (string, bool) {
	type answer struct {
		vols []api.Volume
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := l.Volumes()
		ch <- answer{v, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		return "fabraidd did not answer", false
	}
	if a.err != nil {
		return a.err.Error(), true
	}
	devs, skipped, err := discover.Devices(staticLister(a.vols), discover.Env{})
	if err != nil {
		return err.Error(), true
	}
	up := map[string]bool{}
	for _, d := range devs {
		up[d.Volume] = true
	}
	// The daemon's reason, e.g. why the start gate holds a volume back.
	reason := map[string]string{}
	for _, v := range a.vols {
		if v.Error != "" {
			reason[v.Name] = ": " + v.Error
		}
	}
	if len(want) == 0 {
		for _, v := range a.vols {
			want = append(want, v.Name)
		}
	}
	var why []string
	for _, v := range want {
		switch {
		case up[v]:
		case skipped[v] != "":
			why = append(why, v+": "+skipped[v]+reason[v])
		default:
			why = append(why, v+": no such volume")
		}
	}
	sort.Strings(why)
	return strings.Join(why, "; "), true
}

type staticLister []api.Volume

func (s staticLister) Volumes() ([]api.Volume, error) { return s, nil }
