// Package packaging holds what the packages install besides the binaries
// (packaging/README.md). Its only Go is this file: the default
// configuration, embedded so that the binaries write fabraid.conf(5) from
// the very text the package installs as /etc/fabraid/fabraid.conf.
package packaging

import _ "embed"

// DefaultConfig is packaging/fabraid.conf: every key, commented, with its
// default and what it does.
//
//go:embed fabraid.conf
var DefaultConfig []byte
