package clusterplane

import (
	"testing"

	"github.com/fabraid/fabraid/internal/deptest"
)

// TestDeps: the plane sits below the daemon; the daemon routes its API to
// it, never the other way round.
func TestDeps(t *testing.T) {
	deptest.Checker{BadDeps: map[string]string{
		"github.com/fabraid/fabraid/internal/daemon": "the daemon is the layer above: it picks the plane or the one-node volume manager",
	}}.Check(t)
}
