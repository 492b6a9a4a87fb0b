package nvmet

import (
	"fmt"
	"strings"
)

// Ownership tells which configfs objects belong to fabraid. Apply creates,
// changes and removes only owned objects; everything else (another tool's
// subsystems, ports, hosts) is left alone. The one exception: an owned
// subsystem that is being removed is first unlinked from every port,
// owned or not, because the kernel cannot drop a linked subsystem cleanly.
//
// Names are derived from desired state (NQN prefix, port id range), so
// ownership survives a crash and a restart with no extra bookkeeping.
type Ownership struct {
	// SubsystemPrefix: subsystems whose NQN starts with it are owned.
	SubsystemPrefix string
	// MinPort..MaxPort (inclusive): owned port ids.
	MinPort, MaxPort uint16
	// Host reports whether a host NQN that is not in the desired Spec may
	// be removed. Nil uses the default rule: a host is removed when some
	// owned subsystem allows it and no foreign subsystem does. A host left
	// unlinked by a crash between unlink and rmdir then stays behind (it
	// holds no access: nothing links it); set Host to collect such hosts.
	Host func(nqn string) bool
}

// DefaultOwnership owns subsystems named nqn.2026-11.io.fabraid:* and ports
// 18000..18999 (fabraid's port ids are derived from the volume or drive; see
// docs/nvmeof.md).
func DefaultOwnership() Ownership {
	return Ownership{
		SubsystemPrefix: "nqn.2026-11.io.fabraid:",
		MinPort:         18000,
		MaxPort:         18999,
	}
}

// VolumeOwnership and DriveOwnership split the fabraid namespace between
// two reconcilers that Apply separately (the volume manager and the drive
// exporter): each owns its NQN kind and its port range, and leaves the
// other's objects alone. Hosts allowed by both kinds are kept by either
// while the other still allows them. With a single reconciler for the whole
// Spec use DefaultOwnership; never mix DefaultOwnership with these on one
// node: its Apply would remove the other reconciler's objects.
func VolumeOwnership() Ownership {
	return Ownership{SubsystemPrefix: "nqn.2026-11.io.fabraid:vol:", MinPort: 18000, MaxPort: 18099}
}

// DriveOwnership: see VolumeOwnership.
func DriveOwnership() Ownership {
	return Ownership{SubsystemPrefix: "nqn.2026-11.io.fabraid:drive:", MinPort: 18100, MaxPort: 18199}
}

func (o Ownership) ownsSubsystem(nqn string) bool {
	return o.SubsystemPrefix != "" && strings.HasPrefix(nqn, o.SubsystemPrefix)
}

func (o Ownership) ownsPort(id uint16) bool { return id >= o.MinPort && id <= o.MaxPort }

func (o Ownership) String() string {
	return fmt.Sprintf("subsystems %s*, ports %d..%d", o.SubsystemPrefix, o.MinPort, o.MaxPort)
}
