package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/nsd/discover"
	"github.com/fabraid/fabraid/nsd/name"
	"github.com/fabraid/fabraid/nsd/stanza"
	"github.com/spf13/cobra"
)

func newNsdCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nsd",
		Short: "IBM Storage Scale: NSD discovery lines and stanza files for the volumes",
		Long: `Storage Scale integration (docs/storage-scale.md): the devices for the
nsddevices user exit, the stanza file for mmcrnsd -F, and the volume behind an
NSD name.` + volumeExitCodes,
	}
	cmd.PersistentFlags().String("config", config.DefaultPath, "configuration file (api_socket, nsd_discovery)")
	cmd.PersistentFlags().String("socket", "", "fabraidd API socket (default: api_socket from the configuration)")
	cmd.AddCommand(newNsdDevicesCmd(), newNsdStanzaCmd(), newNsdShowCmd())
	return cmd
}

// errQuiet is an error main does not print: the exit status says it all.
var errQuiet = errors.New("")

func newNsdDevicesCmd() *cobra.Command {
	var userExit bool
	cmd := &cobra.Command{
		Use:   "devices [--user-exit]",
		Short: "Print the nsddevices lines: 'nvmeXnY generic' per volume head on this node",
		Long: `Print one line "deviceName generic" per fabraid volume whose consumer device
(the NVMe multipath head, name relative to /dev) exists on this node and is in
/proc/partitions. Hidden path nodes nvmeXcYnZ are never printed; volumes that
are not listed are named on stderr.

--user-exit is what packaging/scale/nsddevices runs: on success it exits with
the status the user exit must return, 1 for nsd_discovery = merge (Scale also
runs its built-in discovery) and 0 for exclusive (Scale uses only this list).
Any error prints nothing and exits 1 (merge), so Scale's own discovery still
runs.` + volumeExitCodes,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := printDevices(cmd)
			if !userExit {
				return err
			}
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("%w (returning 1: Scale runs its built-in discovery)", err)}
			}
			if c, _ := loadConfig(cmd); c.NSDDiscovery == config.NSDExclusive {
				return nil
			}
			return &exitError{code: 1, err: errQuiet} // merge
		},
	}
	cmd.Flags().BoolVar(&userExit, "user-exit", false, "exit with the nsddevices return value (0 exclusive, 1 merge)")
	return cmd
}

// printDevices writes the lines only once all of them are known, so a
// failure prints none.
func printDevices(cmd *cobra.Command) error {
	c, err := apiClient(cmd)
	if err != nil {
		return err
	}
	devs, skipped, err := discover.Devices(c, discover.Env{})
	if err != nil {
		return apiError(err)
	}
	var b strings.Builder
	for _, d := range devs {
		b.WriteString(d.Line() + "\n")
	}
	fmt.Fprint(cmd.OutOrStdout(), b.String())
	vols := make([]string, 0, len(skipped))
	for v := range skipped {
		vols = append(vols, v)
	}
	sort.Strings(vols)
	for _, v := range vols {
		fmt.Fprintf(cmd.ErrOrStderr(), "fabraid nsd devices: volume %s not listed: %s\n", v, skipped[v])
	}
	return nil
}

func newNsdStanzaCmd() *cobra.Command {
	var o stanza.Options
	cmd := &cobra.Command{
		Use:   "stanza [--volumes V,...] [--usage U] [--pool P] [--failure-group auto|N] [--servers N,...]",
		Short: "Write the %nsd stanzas for mmcrnsd -F (run it on the node that runs mmcrnsd)",
		Long: `Write one %nsd stanza per volume (default: every volume) to stdout:
device= this node's consumer device, nsd= the NSD name derived from the volume
name, usage= (default dataAndMetadata), failureGroup= (auto: 1 for every
fabraid NSD, see docs/storage-scale.md), pool= when given. servers= is written
only with --servers: every fabraid node opens the volume through its own head,
so no NSD server is needed.

NSD names follow IBM's mmcrnsd rules (letters, digits, '_'; not starting with
"gpfs"): other characters become '_', a name starting with "gpfs" gets the
prefix "fab_". Volumes whose names map to the same NSD name are refused, as
are volumes without a consumer device on this node.` + volumeExitCodes,
		Example: `  fabraid nsd stanza > nsd.stanza && mmcrnsd -F nsd.stanza
  fabraid nsd stanza --volumes scratch-01 --usage dataOnly --pool fast`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			vols, err := c.Volumes()
			if err != nil {
				return apiError(err)
			}
			st, err := stanza.Build(vols, o)
			if err != nil {
				return err
			}
			return stanza.Write(cmd.OutOrStdout(), st)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Volumes, "volumes", nil, "volumes to write (default: all)")
	f.StringVar(&o.Usage, "usage", "", "usage: "+strings.Join(stanza.Usages, ", ")+" (default dataAndMetadata)")
	f.StringVar(&o.Pool, "pool", "", "storage pool (default: not written, Scale uses system)")
	f.StringVar(&o.FailureGroup, "failure-group", "auto", "failure group: auto (one group for all fabraid NSDs) or -1..4000")
	f.StringSliceVar(&o.Servers, "servers", nil, "NSD servers (only if some Scale nodes are not fabraid nodes)")
	return cmd
}

func newNsdShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NSD",
		Short: "Show the fabraid volume behind an NSD name (what the diskFailure callback logs)",
		Long:  "Show the fabraid volume(s) whose name maps to the NSD name." + volumeExitCodes,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			vols, err := c.Volumes()
			if err != nil {
				return apiError(err)
			}
			var hits []api.Volume
			for _, v := range vols {
				if n, err := name.Map(v.Name); err == nil && n == args[0] {
					hits = append(hits, v)
				}
			}
			if len(hits) == 0 {
				return fmt.Errorf("NSD %s: no fabraid volume on this node maps to it", args[0])
			}
			if asJSON {
				return printJSON(cmd, hits)
			}
			w := cmd.OutOrStdout()
			for _, v := range hits {
				fmt.Fprintf(w, "nsd %s: volume %s (%s) state %s device %s ublk %s %d+%d failed_members %d stale_members %d",
					args[0], v.Name, v.UUID, v.State, orNone(v.Device), orNone(v.Ublk), v.K, v.M, v.Failed, v.Stale)
				if v.Error != "" {
					fmt.Fprintf(w, " error %q", v.Error)
				}
				fmt.Fprintln(w)
				for _, m := range v.Members {
					fmt.Fprintf(w, "  slot %d %s %s %s\n", m.Slot, m.Role, orNone(m.Device), m.Domain)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
