package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/spf13/cobra"
)

func newNvmeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nvme",
		Short: "Inspect and drive NVMe-oF: initiator controllers, discovery, the nvmet target, DH-HMAC-CHAP keys",
	}
	cmd.AddCommand(newNvmeListCmd(), newNvmeDiscoverCmd(), newNvmeConnectCmd(), newNvmeDisconnectCmd(),
		newNvmeTargetCmd(), newNvmeGenKeyCmd(), newNvmeHostIDCmd())
	return cmd
}

// nvmeError maps a missing kernel feature to exit code 3 and bad options to 2.
func nvmeError(err error) error {
	switch {
	case errors.Is(err, nvmf.ErrNotSupported), errors.Is(err, nvmet.ErrNotSupported):
		return &exitError{code: 3, err: err}
	case errors.Is(err, nvmf.ErrInvalidOptions):
		return &exitError{code: 2, err: err}
	}
	return err
}

func newNvmeListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List NVMe controllers with their subsystem, state, address, timeouts and paths (sysfs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := nvmf.NewHost().Sysfs.Controllers()
			if err != nil {
				return err
			}
			if asJSON {
				if cs == nil {
					cs = []nvmf.Controller{}
				}
				return printJSON(cmd, cs)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CONTROLLER\tTRANSPORT\tADDRESS\tSTATE\tSUBSYSTEM NQN\tPATHS")
			for _, c := range cs {
				var paths []string
				for _, p := range c.Paths {
					s := p.Name + "->" + p.Head
					if p.ANAState != "" {
						s += "(" + p.ANAState + ")"
					}
					paths = append(paths, s)
				}
				addr := c.Address.TrAddr
				if c.Address.TrSvcID != "" {
					addr += ":" + c.Address.TrSvcID
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Transport, addr, c.State, c.SubsystemNQN, strings.Join(paths, ","))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

type nvmeTargetFlags struct {
	transport, traddr, trsvcid, hostDir string
}

func (f *nvmeTargetFlags) add(cmd *cobra.Command, defPort string) {
	cmd.Flags().StringVar(&f.transport, "transport", "tcp", "transport: tcp, rdma, fc or loop")
	cmd.Flags().StringVar(&f.traddr, "traddr", "", "target address")
	cmd.Flags().StringVar(&f.trsvcid, "trsvcid", defPort, "target service id (port)")
	cmd.Flags().StringVar(&f.hostDir, "host-dir", nvmf.DefaultHostDir, "directory with hostnqn and hostid (shared with nvme-cli)")
}

func (f *nvmeTargetFlags) options() (nvmf.Options, error) {
	id, err := nvmf.LoadHostIdentity(f.hostDir)
	if err != nil {
		return nvmf.Options{}, err
	}
	o := nvmf.Options{Transport: nvmf.Transport(f.transport), Address: f.traddr, ServiceID: f.trsvcid, HostNQN: id.NQN, HostID: id.ID}
	if o.Transport == nvmf.Loop {
		o.Address, o.ServiceID = "", ""
	}
	return o, nil
}

func newNvmeDiscoverCmd() *cobra.Command {
	var f nvmeTargetFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "discover",
		Short:   "Read the discovery log page of a target",
		Example: "  fabraid nvme discover --traddr 10.0.0.2",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			l, err := nvmf.NewHost().Discover(o)
			if err != nil {
				return nvmeError(err)
			}
			if asJSON {
				return printJSON(cmd, l)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TYPE\tTRANSPORT\tADDRESS\tPORT ID\tNQN")
			for _, e := range l.Entries {
				fmt.Fprintf(w, "%s\t%s\t%s:%s\t%d\t%s\n", e.Subtype, e.Transport(), e.TrAddr, e.TrSvcID, e.PortID, e.SubNQN)
			}
			return w.Flush()
		},
	}
	f.add(cmd, nvmf.DefaultIOPort)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newNvmeConnectCmd() *cobra.Command {
	var f nvmeTargetFlags
	var nqn, profile, secretFile, ctrlSecretFile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "connect",
		Short:   "Connect a controller with a fabraid timeout profile",
		Example: "  fabraid nvme connect --traddr 10.0.0.2 --nqn nqn.2026-11.io.fabraid:drive:S4EW... --profile member",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			o.NQN = nqn
			if profile != "" {
				t, err := nvmf.Profile(profile)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				o.Timeouts = &t
			}
			for _, s := range []struct {
				file string
				dst  *string
			}{{secretFile, &o.DHCHAPSecret}, {ctrlSecretFile, &o.DHCHAPCtrlSecret}} {
				if s.file == "" {
					continue
				}
				sec, err := nvmf.LoadSecret(s.file)
				if err != nil {
					return err
				}
				*s.dst = sec.Reveal()
			}
			c, err := nvmf.NewHost().Connect(o)
			if err != nil {
				return nvmeError(err)
			}
			if asJSON {
				return printJSON(cmd, c)
			}
			fmt.Fprintln(cmd.OutOrStdout(), c.Name)
			return nil
		},
	}
	f.add(cmd, nvmf.DefaultIOPort)
	cmd.Flags().StringVar(&nqn, "nqn", "", "subsystem NQN")
	cmd.Flags().StringVar(&profile, "profile", nvmf.ProfileMember, "timeout profile: member, volume-path or kernel-default")
	cmd.Flags().StringVar(&secretFile, "dhchap-secret-file", "", "file (0600) with this host's DH-HMAC-CHAP secret")
	cmd.Flags().StringVar(&ctrlSecretFile, "dhchap-ctrl-secret-file", "", "file (0600) with the controller's DH-HMAC-CHAP secret (bidirectional)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the controller as JSON")
	cmd.MarkFlagRequired("nqn")
	return cmd
}

func newNvmeDisconnectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "disconnect nvmeN...",
		Short: "Delete controllers (may block up to 60 s when the target is unreachable)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h := nvmf.NewHost()
			for _, n := range args {
				if err := h.Disconnect(n); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func newNvmeTargetCmd() *cobra.Command {
	var root string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "target",
		Short: "Show the nvmet target configuration (configfs; secrets redacted) and its features",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := nvmet.Read(root)
			if err != nil {
				return err
			}
			for i := range st.Hosts {
				for _, k := range []*string{&st.Hosts[i].DHCHAPKey, &st.Hosts[i].DHCHAPCtrlKey} {
					if *k != "" {
						*k = "<secret>"
					}
				}
			}
			if asJSON {
				return printJSON(cmd, st)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "features seen: %v\n", st.Features)
			for _, p := range st.Ports {
				fmt.Fprintf(out, "port %d %s %s:%s tls=%v ana=%v subsystems=%v\n", p.ID, p.Transport, p.Address, p.ServiceID, p.TLS, p.ANAStates, p.Subsystems)
			}
			for _, s := range st.Subsystems {
				fmt.Fprintf(out, "subsystem %s serial=%q model=%q allow_any_host=%v hosts=%v\n", s.NQN, s.Serial, s.Model, s.AllowAnyHost, s.AllowedHosts)
				for _, ns := range s.Namespaces {
					fmt.Fprintf(out, "  namespace %d %s uuid=%s ana_group=%d enabled=%v\n", ns.NSID, ns.DevicePath, ns.UUID, ns.ANAGroup, !ns.Disabled)
				}
			}
			for _, h := range st.Hosts {
				fmt.Fprintf(out, "host %s dhchap=%v\n", h.NQN, h.DHCHAPKey != "")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", nvmet.DefaultRoot, "nvmet configfs root")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newNvmeGenKeyCmd() *cobra.Command {
	var keyLen int
	var out string
	cmd := &cobra.Command{
		Use:   "gen-dhchap-key",
		Short: "Generate a DH-HMAC-CHAP secret (DHHC-1 format, as nvme gen-dhchap-key)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := nvmf.GenerateSecret(keyLen)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if out != "" {
				return nvmf.SaveSecret(out, s)
			}
			fmt.Fprintln(cmd.OutOrStdout(), s.Reveal())
			return nil
		},
	}
	cmd.Flags().IntVar(&keyLen, "key-length", 32, "key length in bytes: 32, 48 or 64")
	cmd.Flags().StringVar(&out, "out", "", "write the secret to this file (mode 0600) instead of stdout")
	return cmd
}

func newNvmeHostIDCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "hostid",
		Short: "Print this host's NQN and host id (created like nvme-cli when missing)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := nvmf.LoadHostIdentity(dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "hostnqn %s\nhostid %s\n", id.NQN, id.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "host-dir", nvmf.DefaultHostDir, "directory with hostnqn and hostid")
	return cmd
}
