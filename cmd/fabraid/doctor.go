package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/doctor"
	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/kernel/ublk"
	"github.com/fabraid/fabraid/kernel/uring"
	"github.com/spf13/cobra"
)

// exitMissing is doctor's exit code when a required piece is missing.
const exitMissing = 3

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this node for everything fabraid needs and say how to fix what is missing",
		Long: `doctor inspects the running kernel and the node's NVMe identity: configfs,
nvmet and nvmet-tcp, nvme-tcp with native multipath, ublk_drv and its feature
bits (asked from the kernel), io_uring, /etc/nvme/hostnqn and hostid, and
whether nvmet has DH-HMAC-CHAP, and with nvme_tls = on or required whether
the node can do NVMe/TCP TLS (NVME_TARGET_TCP_TLS, NVME_TCP_TLS, the .nvme
keyring, tlshd running; missing under required). Without DH-HMAC-CHAP, with require_auth on (the default;
read from --config), a cluster node refuses to export its drives and volumes:
a missing piece whose fix names the kernel option and the require_auth = false
opt-out; with require_auth = false it is a warning (exports by host NQN alone).

Exit status: 0 when every required piece is present, 3 when one is missing.`,
		Example: "  fabraid doctor\n  fabraid doctor --json | jq '.checks[] | select(.status != \"ok\")'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			d := &doctor.Doctor{Root: "/", Probes: liveProbes(), AllowUnauthenticated: !c.Cluster.RequireAuth, NVMeTLS: fabrictls.Mode(c.Cluster.NVMeTLS)}
			rep := d.Run()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else if err := rep.WriteText(out); err != nil {
				return err
			}
			if !rep.Healthy() {
				return &exitError{code: exitMissing, err: errors.New("required kernel features or configuration missing")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().String("config", config.DefaultPath, "configuration file (require_auth)")
	return cmd
}

// liveProbes asks the running kernel through our ublk and io_uring packages.
func liveProbes() doctor.Probes {
	return doctor.Probes{
		UblkFeatures: func() (uint64, []string, error) {
			if _, err := os.Stat(ublk.ControlPath); err != nil {
				return 0, nil, err
			}
			ctl, err := ublk.OpenControl()
			if err != nil {
				return 0, nil, err
			}
			defer ctl.Close()
			f := ctl.Features()
			return uint64(f), f.Names(), nil
		},
		IOUring: func() error {
			r, err := uring.New(2, nil)
			if err != nil {
				return err
			}
			return r.Close()
		},
		NvmetAuth: func() (bool, error) {
			return nvmet.HostAuth(nvmet.DefaultRoot, fmt.Sprintf("nqn.2014-08.org.nvmexpress:fabraid-doctor-%d", os.Getpid()))
		},
		TLS: func() (fabrictls.Support, fabrictls.Support, error) {
			// A port id above every ownership's range (kernel/nvmet).
			ok, err := nvmet.PortTLS(nvmet.DefaultRoot, uint16(60000+os.Getpid()%5000))
			if err != nil {
				return fabrictls.Support{}, fabrictls.Support{}, err
			}
			return fabrictls.TargetSupport(ok), fabrictls.HostSupport(nvmf.NewHost()), nil
		},
	}
}
