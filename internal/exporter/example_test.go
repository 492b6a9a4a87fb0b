package exporter_test

import (
	"bytes"
	"fmt"

	"github.com/fabraid/fabraid/internal/exporter"
	"github.com/fabraid/fabraid/kernel/nvmet"
	"github.com/fabraid/fabraid/kernel/nvmf"
)

// This node holds drive S1 of a volume owned by host B: S1 is exported to
// B alone, with B's DH-HMAC-CHAP key (printed as <secret>). Drive S2 is in
// no volume and stays unexported.
func ExampleDesire() {
	b := "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b"
	in := exporter.Input{
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0a0a0a0a-0000-4000-8000-00000000000a",
		Drives:  []exporter.Drive{{ID: "S1", Path: "/dev/nvme0n1"}, {ID: "S2", Path: "/dev/nvme1n1"}},
		Volumes: []exporter.Volume{{UUID: "v1", Owner: exporter.Host{NQN: b, Secret: nvmf.SecretText(nvmf.Secret{Key: bytes.Repeat([]byte{1}, 32)}.Reveal())},
			Members: []string{"S1", "n2-S7", "n3-S9"}}},
		Addresses: []string{"10.0.0.1"},
	}
	d := exporter.Desire(in, nvmet.Features{Auth: true})
	plan, err := nvmet.Diff(d.Spec, nvmet.State{}, nvmet.DriveOwnership())
	if err != nil {
		panic(err)
	}
	fmt.Print(plan)
	// Output:
	// mkdir hosts/nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b
	// write hosts/nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b/dhchap_key = <secret>
	// mkdir subsystems/nqn.2026-11.io.fabraid:drive:S1
	// write subsystems/nqn.2026-11.io.fabraid:drive:S1/attr_serial = "43621396615287f08489"
	// write subsystems/nqn.2026-11.io.fabraid:drive:S1/attr_model = "fabraid drive"
	// link subsystems/nqn.2026-11.io.fabraid:drive:S1/allowed_hosts/nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b -> hosts/nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0000-4000-8000-00000000000b
	// mkdir subsystems/nqn.2026-11.io.fabraid:drive:S1/namespaces/1
	// write subsystems/nqn.2026-11.io.fabraid:drive:S1/namespaces/1/device_path = "/dev/nvme0n1"
	// write subsystems/nqn.2026-11.io.fabraid:drive:S1/namespaces/1/device_uuid = "43621396-6152-87f0-8489-f97452f446b2"
	// write subsystems/nqn.2026-11.io.fabraid:drive:S1/namespaces/1/device_nguid = "43621396-6152-87f0-8489-f97452f446b2"
	// write subsystems/nqn.2026-11.io.fabraid:drive:S1/namespaces/1/enable = "1"
	// mkdir ports/18100
	// write ports/18100/addr_trtype = "tcp"
	// write ports/18100/addr_adrfam = "ipv4"
	// write ports/18100/addr_traddr = "10.0.0.1"
	// write ports/18100/addr_trsvcid = "4421"
	// link ports/18100/subsystems/nqn.2026-11.io.fabraid:drive:S1 -> subsystems/nqn.2026-11.io.fabraid:drive:S1
}
