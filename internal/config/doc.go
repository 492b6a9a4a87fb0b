// Package config reads the fabraid node configuration file,
// /etc/fabraid/fabraid.conf.
//
// # Format
//
// One "key = value" per line; blank lines and lines starting with '#' are
// ignored; values are taken verbatim after trimming spaces (no quoting).
// Lists are comma-separated. Repeated keys and invalid values are errors
// that name the file, the line and the key. Unknown keys are not: a key of
// a newer release (after a downgrade) or of an older one (after an
// upgrade) must not keep the daemon from starting, so Parse skips the line
// and records it in Config.Warnings, which fabraidd logs at start.
//
//	# /etc/fabraid/fabraid.conf
//	node_name          = node1
//	storage_interfaces = eth1, eth2
//	storage_cidrs      = 10.10.0.0/16
//	state_dir          = /var/lib/fabraid
//	api_socket         = /run/fabraid/api.sock
//	metrics_address    = 127.0.0.1:9436
//	export_address     = 127.0.0.1
//	export_port        = 4420
//	engine_mode        = auto
//	cluster_address    = 10.10.0.1      # cluster keys: see Cluster
//	etcd_members       = 3
//
// engine_mode says how fabraidd runs each volume's engine: "process" (a
// child process it supervises), "systemd" (a fabraid-engine@<volume>
// systemd unit started over D-Bus; an error at startup when systemd is not
// PID 1 or the template is not installed) or "auto" (the default: systemd
// when both hold, else process).
//
// ublk_zero_copy is "auto" (the default: zero-copy healthy reads where the
// kernel's ublk offers AUTO_BUF_REG) or "off" (engines keep the copy path,
// "fabraidd engine --no-zero-copy").
//
// rebuild_busy_rate is bytes per second (K, M, G, T suffixes: powers of
// 1024; default 100M, 0 off) for an engine's rebuilds (returning members'
// resyncs too) and scrubs while its volume serves foreground I/O
// ("fabraidd engine --rebuild-busy-rate", engine.RebuildOptions.BusyRate).
//
// Every key is optional; Default lists the defaults. A missing file is not an
// error for Load when the caller asks for defaults (LoadOrDefault).
//
// The package holds no global state and does no I/O beyond reading the file.
package config
