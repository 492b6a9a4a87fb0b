// Package daemon is fabraidd, the node daemon: it loads the configuration,
// runs the reconcile loop (the volume manager's, or the cluster plane's in
// a cluster), serves the API (package api) on a root-only unix socket,
// exposes Prometheus metrics and talks to systemd.
//
// # Reconcile loop
//
// Reconcile runs at start, every Interval (default 10 s), after every API
// call that changes volumes, and when an engine child exits (process mode). It is
// level-triggered: each run reads the drives' superblocks, the running
// engines, configfs and sysfs again (see internal/volmgr).
//
// # Volumes
//
// The volume API and the volume half of each reconcile go through one
// interface, Volumes (volumes.go): the one-node volume manager while the
// node is in no cluster, the cluster data plane (package clusterplane)
// from the moment the node has cluster state or external etcd. The
// daemon keeps the membership itself (membership.go: cluster init, join,
// tokens, leave) and the HTTP encoding of every answer.
//
// # systemd
//
// With NOTIFY_SOCKET set (Type=notify), READY=1 is sent after the first
// reconcile, STATUS= after each one ("3 volumes: 2 optimal, 1 degraded"), and
// WATCHDOG=1 at half of WatchdogSec when the unit sets it. Reconciles run in
// their own goroutine, one at a time, so a slow engine start does not starve
// the watchdog; one running longer than 10 minutes stops the pings. Without
// NOTIFY_SOCKET nothing is sent.
//
// # Metrics
//
// Read at every scrape from the volume manager (no cached counters):
//
//	fabraid_volume_info{volume,uuid,device,nqn}          1
//	fabraid_volume_state{volume,state}                   1 for the current state (optimal, degraded, rebuilding, failed, stopped, waiting)
//	fabraid_volume_size_bytes{volume}
//	fabraid_volume_failed_members{volume}
//	fabraid_volume_stale_members{volume}
//	fabraid_volume_task_progress_ratio{volume,kind}      0..1 while a rebuild, resync or scrub runs
//	fabraid_volume_scrub_mismatches{volume}              of the last scrub
//	fabraid_volume_write_hole_stripes{volume}            normally 0
//	fabraid_volume_rebuild_written_bytes{volume}         the running or last rebuild: written so far,
//	fabraid_volume_rebuild_to_write_bytes{volume}        to write when it started,
//	fabraid_volume_rebuild_member_bytes{volume}          one member's data area,
//	fabraid_volume_rebuild_partial{volume}               1: a resync of returning members,
//	fabraid_volume_rebuild_running{volume}               1: still running
//	fabraid_volume_requests_total{volume,op} ...         the engine's I/O counters (metrics.go)
//	fabraid_reconcile_errors_total
//
// # Engines
//
// How engines run is chosen once at start (config key engine_mode, see
// volmgr.ChooseEngineMode). With systemd as PID 1 and the
// fabraid-engine@.service template installed, each volume's engine is the
// unit fabraid-engine@<volume> started over D-Bus (volmgr.SystemdStarter):
// systemd restarts a crashed engine, which re-attaches to its ublk device
// with user recovery, and the units are not bound to fabraidd. Otherwise
// each engine is a child process (fabraidd engine ...), supervised: a
// crashed engine is restarted by the daemon. Either way engines survive a
// daemon restart and are adopted through their socket.
package daemon
