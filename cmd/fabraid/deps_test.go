package main

import (
	"testing"

	"github.com/fabraid/fabraid/internal/deptest"
)

// TestDeps keeps the CLI small: udev runs it for every member and head
// (udev-probe, udev-remove), and Storage Scale runs it from the nsddevices
// user exit (packaging/scale/nsddevices) and its callbacks. Before the
// volume identity (internal/volid) and the API types (internal/api) left
// the volume manager, it linked gRPC and go-plugin through volmgr's target
// backends.
func TestDeps(t *testing.T) {
	deptest.Checker{BadDeps: deptest.DaemonOnly}.Check(t)
}
