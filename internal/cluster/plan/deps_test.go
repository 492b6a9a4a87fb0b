package plan

import (
	"testing"

	"github.com/fabraid/fabraid/internal/deptest"
)

// TestDeps: the adapters are pure functions from records to the data
// plane's desired state; they name volumes through internal/volid and
// must not link the volume manager they feed, nor etcd.
func TestDeps(t *testing.T) {
	deptest.Checker{BadDeps: map[string]string{
		"github.com/fabraid/fabraid/internal/volmgr": "the volume manager is what the daemon feeds plan's output to",
		"go.etcd.io/etcd": "the records come in as values (internal/cluster/model)",
	}}.Check(t)
}
