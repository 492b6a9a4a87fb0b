package nvmet_test

import (
	"fmt"

	"github.com/fabraid/fabraid/kernel/nvmet"
)

// Diff turns desired state and the state read from configfs into an
// ordered plan; here from an empty target.
func ExampleDiff() {
	host := "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b"
	vol := "nqn.2026-11.io.fabraid:vol:demo"
	desired := nvmet.Spec{
		Hosts: []nvmet.Host{{NQN: host}},
		Subsystems: []nvmet.Subsystem{{NQN: vol, AllowedHosts: []string{host},
			Namespaces: []nvmet.Namespace{{NSID: 1, DevicePath: "/dev/ublkb0"}}}},
		Ports: []nvmet.Port{{ID: 18000, Transport: nvmet.TCP, Address: "10.0.0.1", ServiceID: "4420", Subsystems: []string{vol}}},
	}
	plan, err := nvmet.Diff(desired, nvmet.State{}, nvmet.DefaultOwnership())
	if err != nil {
		panic(err)
	}
	fmt.Print(plan)
	// Output:
	// mkdir hosts/nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b
	// mkdir subsystems/nqn.2026-11.io.fabraid:vol:demo
	// link subsystems/nqn.2026-11.io.fabraid:vol:demo/allowed_hosts/nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b -> hosts/nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b
	// mkdir subsystems/nqn.2026-11.io.fabraid:vol:demo/namespaces/1
	// write subsystems/nqn.2026-11.io.fabraid:vol:demo/namespaces/1/device_path = "/dev/ublkb0"
	// write subsystems/nqn.2026-11.io.fabraid:vol:demo/namespaces/1/enable = "1"
	// mkdir ports/18000
	// write ports/18000/addr_trtype = "tcp"
	// write ports/18000/addr_adrfam = "ipv4"
	// write ports/18000/addr_traddr = "10.0.0.1"
	// write ports/18000/addr_trsvcid = "4420"
	// link ports/18000/subsystems/nqn.2026-11.io.fabraid:vol:demo -> subsystems/nqn.2026-11.io.fabraid:vol:demo
}
