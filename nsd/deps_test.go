package nsd_test

import (
	"testing"

	"github.com/fabraid/fabraid/internal/deptest"
)

// TestDeps: the Storage Scale packages run in the CLI (the nsddevices user
// exit, stanzas, fabraid wait) and know volumes through internal/api and
// internal/volid only.
func TestDeps(t *testing.T) {
	deptest.Checker{Packages: []string{"./..."}, BadDeps: deptest.DaemonOnly}.Check(t)
}
