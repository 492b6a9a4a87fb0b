// Package volmgr is the node's volume manager: it turns claimed local drives
// into parity-protected volumes, serves each volume as a ublk block device,
// exports it over NVMe/TCP with the kernel target (nvmet) and connects the node
// to its own export, so consumers always use the NVMe multipath head
// (/dev/nvmeXnY) of nqn.2026-11.io.fabraid:vol:<uuid>.
//
// # Reconcile
//
// Manager.Reconcile is level-triggered and idempotent. Desired state is read
// from disk every time: the superblocks on the claimed drives say which
// volumes exist and which drives are their members. Actual state is the
// running engines, /sys/kernel/config/nvmet and the NVMe controllers in sysfs.
// Missing engines are assembled and started (a ublk device left by a dead
// engine is re-attached with user recovery, so consumers see a pause, not an
// error; the engines of different volumes start concurrently, see
// engines.go for the locking rule), the exports are converged with the target backend's Apply
// (plugins/backend, scope volid.NQNPrefix: Options.Target, by default the kernel
// nvmet backend in this process) and connections with nvmf.PlanConnections.
//
// # Export identity
//
// The subsystem NQN is nqn.2026-11.io.fabraid:vol:<volume uuid>; namespace 1
// carries the volume UUID as its UUID and NGUID, the first 20 hex digits of the
// UUID as serial and "fabraid volume" as model, so the identity is the same on
// every start and, later, on every owner node. Only this node's host NQN is
// allowed; allow_any_host is never set. The node connects on the configured
// export address (default 127.0.0.1:4420, port id 18000) with the volume-path
// timeout profile: I/O is queued, not failed, while the path reconnects.
// The kernel backend reconciles scope volid.NQNPrefix with nvmet.VolumeOwnership:
// vol: subsystems and ports 18000-18099 only; anything else in configfs is
// left alone.
//
// # Engines
//
// Each volume's engine (engine.Volume + ublk.Device) runs behind the Engine
// interface: in this process (Local), in a supervised child process
// (ChildStarter), or as the systemd unit fabraid-engine@<volume> started over
// D-Bus (SystemdStarter, reading its spec file, see SpecFile).
// ChooseEngineMode picks between the last two. The daemon talks to engine
// processes with a versioned protocol (engineproto.go): the daemon and an
// engine of another version talk when their protocol ranges overlap, and
// never otherwise.
package volmgr
